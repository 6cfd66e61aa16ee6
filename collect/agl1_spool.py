"""Reading the Agent Lightning 1.0 spool: the finished rollouts the hook (or the REST reader) saved.

The format is owned by ``agl1_hook`` (it must stay stdlib-only, so it cannot import
this module); this side lists complete entries, ignores what a killed writer left
(``.tmp-`` files), and removes entries once a committed collection holds them.

Only regular files are opened (a FIFO named ``x.json`` would block a reader for
ever, a symlink could point anywhere); a file that is not an entry (see
``agl1_check``) is moved into ``rejected/`` so the rest of the spool is committed.
"""

from __future__ import annotations

import json
import os
import stat
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracebank.collect.agl1_check import entry_problem
from tracebank.collect.agl1_hook import SUFFIX, TMP_MARK
from tracebank.collect.errors import CollectError, CollectUsageError

REJECTED = "rejected"  # the spool's subfolder that bad files are moved into


class SpoolError(CollectError):
    """A spool file that cannot be read as a spool entry."""


@dataclass(frozen=True)
class SpoolEntry:
    """One spooled rollout attempt: its file and its parsed content."""

    path: Path
    data: dict[str, Any]

    @property
    def key(self) -> tuple[str, str]:
        """(rollout_id, attempt_id): what makes an entry a duplicate of a committed one."""
        return (str(self.data["rollout_id"]), str(self.data["attempt_id"]))

    def events(self) -> list[dict[str, Any]]:
        """The events of the spooled attempt, in the order the server recorded them."""
        return list(self.data.get("events_by_attempt", {}).get(self.key[1], []))


def spool_files(folder: Path) -> list[Path]:
    """Complete spool files in ``folder`` (sorted): not the temporary ones a killed writer left,
    nor hidden files (the REST reader's cursor)."""
    if not folder.is_dir():
        raise CollectUsageError(
            f"spool folder {folder} does not exist", "pass the folder TRACEBANK_SPOOL names"
        )
    return sorted(
        p
        for p in folder.iterdir()
        if p.name.endswith(SUFFIX) and TMP_MARK not in p.name and not p.name.startswith(".")
    )


def _read_regular(path: Path) -> bytes:
    """The bytes of ``path`` if it is a regular file; anything else is refused unopened."""
    if not stat.S_ISREG(os.lstat(path).st_mode):
        raise ValueError("not a regular file (a folder, link, FIFO or device)")
    # O_NONBLOCK: should a FIFO replace the file after the lstat, open must not wait for a writer
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise ValueError("not a regular file")
        return file.read()


def load_entry(path: Path) -> SpoolEntry | str:
    """One spool file as an entry, or the one-line reason it is not one."""
    try:
        data = json.loads(_read_regular(path))
    except OSError as exc:
        return f"cannot read it ({exc.strerror or exc})"
    except RecursionError:
        return "nested too deeply to parse"
    except ValueError as exc:
        return f"not JSON ({str(exc)[:80]})"
    problem = entry_problem(data)
    return problem if problem else SpoolEntry(path, data)


def read_entry(path: Path) -> SpoolEntry:
    """Parse one spool file, or a SpoolError naming it."""
    entry = load_entry(path)
    if isinstance(entry, str):
        raise SpoolError(f"spool file {path}: {entry}", "move it out of the spool folder")
    return entry


def read_spool(folder: Path) -> list[SpoolEntry]:
    """Every complete entry of the spool (a SpoolError for the first bad file)."""
    return [read_entry(p) for p in spool_files(folder)]


def reject(path: Path) -> str:
    """Move a bad spool file (without opening it) into the spool's ``rejected/``; where it went."""
    folder = path.parent / REJECTED
    try:
        folder.mkdir(exist_ok=True)
        if not stat.S_ISDIR(os.lstat(folder).st_mode):  # a link there could lead out of the spool
            return f"left in place ({REJECTED} is not a folder)"
        target = folder / path.name
        if os.path.lexists(target):
            target = folder / f"{path.stem}.{uuid.uuid4().hex[:8]}{path.suffix}"
        os.rename(path, target)
    except OSError as exc:
        return f"left in place ({exc.strerror or exc})"
    return f"moved to {REJECTED}/"


def remove_entries(paths: Iterable[Path]) -> int:
    """Delete spool files a committed collection now holds; return how many were removed."""
    removed = 0
    for path in paths:
        try:
            os.unlink(path)
            removed += 1
        except FileNotFoundError:
            pass
    return removed
