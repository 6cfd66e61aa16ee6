"""Reading the Agent Lightning 1.0 spool: the finished rollouts the hook (or the REST reader) saved.

The format is owned by ``agl1_hook`` (it must stay stdlib-only, so it cannot import
this module); this side lists complete entries, ignores what a killed writer left
(``.tmp-`` files), and removes entries once a committed collection holds them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracebank.collect.agl1_hook import SPOOL_FORMAT, SUFFIX, TMP_MARK
from tracebank.collect.errors import CollectError, CollectUsageError


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


def read_entry(path: Path) -> SpoolEntry:
    """Parse one spool file, or a SpoolError naming it."""
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise SpoolError(f"cannot read spool file {path}: {exc}", "move it out of the spool folder") from None
    if not isinstance(data, dict) or data.get("format") != SPOOL_FORMAT:
        raise SpoolError(f"{path} is not a {SPOOL_FORMAT} entry", "move it out of the spool folder")
    return SpoolEntry(path, data)


def read_spool(folder: Path) -> list[SpoolEntry]:
    """Every complete entry of the spool."""
    return [read_entry(p) for p in spool_files(folder)]


def remove_entries(entries: Iterable[SpoolEntry]) -> int:
    """Delete spool files a committed collection now holds; return how many were removed."""
    removed = 0
    for entry in entries:
        try:
            os.unlink(entry.path)
            removed += 1
        except FileNotFoundError:
            pass
    return removed
