"""Whole-or-nothing writes of local files: the primitive under the local byte store and the mirror.

A file is written under a name only its writer uses (``<name>.tmp-<random>``), fsynced, then
renamed over its final name and the folder fsynced, so a reader sees the old state or the whole
new file, never a part; a writer killed at any point leaves only a temp file that gc removes.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tracebank.warehouse.layout import TMP_MARK

CHUNK = 1 << 20


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def tmp_name(final: Path) -> Path:
    return final.with_name(f"{final.name}{TMP_MARK}{uuid.uuid4().hex[:12]}")


@contextmanager
def atomic_path(final: Path) -> Iterator[Path]:
    """Yield a temp path to write; on success fsync it and rename it to ``final``."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_name(final)
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, final)
        fsync_dir(final.parent)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_bytes_atomic(final: Path, data: bytes) -> None:
    with atomic_path(final) as tmp:
        tmp.write_bytes(data)


def create_exclusive(final: Path, data: bytes) -> bool:
    """Create ``final`` holding ``data`` unless it exists (True if this call created it).

    The bytes go to a temp file first and are hard-linked into place, which fails when the
    name exists: the create is exclusive and a reader never sees a half-written file.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_name(final)
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, final)
        except FileExistsError:
            return False
        fsync_dir(final.parent)
        return True
    finally:
        tmp.unlink(missing_ok=True)


def json_bytes(obj: Any) -> bytes:
    """How the warehouse writes JSON (manifests, records): sorted keys, indented, a final newline."""
    return (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()
