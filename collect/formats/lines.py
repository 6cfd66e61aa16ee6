"""Reading hostile JSON files one bounded record at a time: the guard every format's parser uses.

A line longer than :data:`MAX_RECORD_BYTES`, JSON that does not parse, a value nested
deeper than :data:`~tracebank.collect.agl1_check.MAX_DEPTH` or a top level that is not an
object becomes a :class:`BadRecord` naming the file and line; the reader moves on. A long
line is skipped without being held in memory whole.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from tracebank.collect.agl1_check import MAX_DEPTH, nesting_depth
from tracebank.collect.conversation import BadRecord

MAX_RECORD_BYTES = 64 * 1024 * 1024
"""The longest record (a JSON line, or a whole JSON document) a parser reads."""
SNIFF_BYTES = 64 * 1024
"""How much of a file's start format sniffing looks at."""
_CHUNK = 1024 * 1024


def open_regular(path: Path) -> BinaryIO:
    """``path`` opened for reading if it is a regular file (a FIFO would block for ever, a device
    never ends); anything else is refused with ValueError, unopened."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise ValueError(f"{path} is not a regular file")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    file = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
        file.close()
        raise ValueError(f"{path} is not a regular file")
    return file


def head(path: Path, size: int = SNIFF_BYTES) -> bytes:
    """The first ``size`` bytes of a regular file."""
    with open_regular(path) as file:
        return file.read(size)


def _lines(file: BinaryIO, limit: int) -> Iterator[bytes | None]:
    """Each line of ``file`` without its newline, or None for a line longer than ``limit``
    (consumed in chunks, never held whole)."""
    while True:
        line = file.readline(limit + 1)
        if not line:
            return
        if len(line) > limit and not line.endswith(b"\n"):
            while (rest := file.readline(_CHUNK)) and not rest.endswith(b"\n"):
                pass
            yield None
            continue
        yield line.rstrip(b"\r\n")


def checked_value(data: bytes, where: str) -> Any | BadRecord:
    """``data`` parsed as JSON, or the BadRecord saying why it cannot be."""
    try:
        value = json.loads(data)
    except RecursionError:
        return BadRecord(where, "nested too deeply to parse")
    except (ValueError, UnicodeDecodeError) as exc:
        return BadRecord(where, f"not JSON ({str(exc)[:80]})")
    if nesting_depth(value) > MAX_DEPTH:
        return BadRecord(where, f"nested deeper than {MAX_DEPTH} levels")
    return value


def json_lines(path: Path, limit: int = MAX_RECORD_BYTES) -> Iterator[tuple[str, dict[str, Any]] | BadRecord]:
    """Each non-blank line of a JSON-lines file as ``(where, object)``, ``where`` being
    ``FILE:LINE``; a line that is not a JSON object is a BadRecord."""
    with open_regular(path) as file:
        for number, line in enumerate(_lines(file, limit), start=1):
            where = f"{path.name}:{number}"
            if line is None:
                yield BadRecord(where, f"longer than {limit} bytes")
                continue
            if not line.strip():
                continue
            value = checked_value(line, where)
            if isinstance(value, BadRecord):
                yield value
            elif not isinstance(value, dict):
                yield BadRecord(where, f"not a JSON object (a {type(value).__name__})")
            else:
                yield where, value


def json_document(path: Path, limit: int = MAX_RECORD_BYTES) -> Any | BadRecord:
    """A whole-file JSON document, or the BadRecord saying why it cannot be read."""
    with open_regular(path) as file:
        data = file.read(limit + 1)
    if len(data) > limit:
        return BadRecord(path.name, f"longer than {limit} bytes")
    return checked_value(data, path.name)


def token_ids(value: Any) -> list[int] | None:
    """``value`` if it is a list of token ids (non-negative ints, not bools), else None."""
    if isinstance(value, list) and all(type(i) is int and 0 <= i < 2**31 for i in value):
        return value
    return None


def finite_number(value: Any) -> float | None:
    """``value`` as a float if it is a finite JSON number (not a bool, not NaN or infinity), else None.

    Python's JSON reader accepts ``NaN`` and ``Infinity``; a reward or log-probability spelled so
    would poison sums and canonical hashes, so it counts as absent."""
    if type(value) in (int, float) and math.isfinite(value):
        return float(value)
    return None


def finite_numbers(value: Any) -> list[float] | None:
    """``value`` as floats if it is a list of finite JSON numbers, else None."""
    if not isinstance(value, list):
        return None
    out = [finite_number(v) for v in value]
    return None if any(v is None for v in out) else [v for v in out if v is not None]
