"""Reading text and log files (``tracebank collect PATH --format NAME``) into a Batch.

A file, or a folder's regular files (sorted; links, FIFOs, devices and subfolders are left
out with a warning each, so nothing outside the folder is read), is parsed by its format's
module (:mod:`tracebank.collect.formats`; sniffed from the file's start when no format is
given). Each conversation becomes a 1.0 spool entry and goes the way a spooled one does
(``agl1_read.offer_entry``: the filters, the skip rule, then the batch); each bad record is
one warning and counts in ``bad_records``. Nothing is written until the batch commits, so a
bad file leaves nothing half-written, and a re-imported file's rollouts are all skipped.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from types import ModuleType

from tracebank.collect.agl1_check import entry_problem
from tracebank.collect.agl1_read import offer_entry
from tracebank.collect.agl1_spool import SpoolEntry
from tracebank.collect.batch import Batch, Progress
from tracebank.collect.config import CollectConfig
from tracebank.collect.conversation import BadRecord, Conversation, spool_entry
from tracebank.collect.errors import CollectUsageError
from tracebank.collect.formats import FORMATS, parser
from tracebank.collect.formats.lines import head

_CHUNK = 256  # records parsed per trip to a worker thread


def available_parser(name: str) -> ModuleType | None:
    """The parser of format ``name``, or None while its module does not exist (yet)."""
    try:
        return parser(name)
    except ModuleNotFoundError as exc:
        if exc.name != f"tracebank.collect.formats.{name}":
            raise
        return None


def sniff(path: Path) -> str | None:
    """The first format (in :data:`FORMATS` order) whose ``sniff`` takes the file's start."""
    start = head(path)
    for name in FORMATS:
        module = available_parser(name)
        if module is not None and module.sniff(start):
            return name
    return None


@dataclass(frozen=True)
class FilePlan:
    """Which files an import reads, in which format, and which it leaves out (one line each)."""

    files: list[tuple[Path, str]]
    left_out: list[str]

    @property
    def format(self) -> str:
        """The format name(s) of the files, for the manifest (``chat``, ``chat+openai``)."""
        return "+".join(sorted({name for _, name in self.files})) or "none"


def _listing(path: Path) -> tuple[list[Path], list[str]]:
    if not path.is_dir():
        return [path], []
    files, left_out = [], []
    for child in sorted(path.iterdir()):
        mode = os.lstat(child).st_mode
        if child.name.startswith("."):
            continue
        if stat.S_ISREG(mode):
            files.append(child)
        else:
            kind = "a link" if stat.S_ISLNK(mode) else "a folder" if stat.S_ISDIR(mode) else "not a file"
            left_out.append(f"{child.name}: left out ({kind}; only regular files are read)")
    return files, left_out


def plan_files(path: Path, format: str | None) -> FilePlan:
    """The files under ``path`` and their formats; a CollectUsageError when ``path`` cannot be read,
    ``format`` is unknown or not written yet, or a single file's format cannot be told."""
    if format is not None and available_parser(format) is None:
        raise CollectUsageError(f"the {format} format cannot be read yet", f"use one of: {_ready()}")
    if not os.path.lexists(path):
        raise CollectUsageError(f"{path} does not exist", "give a chat file or a folder of them")
    files, left_out = _listing(path)
    planned = []
    for file in files:
        try:
            name = format or sniff(file)
        except (OSError, ValueError) as exc:
            left_out.append(f"{file.name}: left out ({_reason(exc)})")
            continue
        if name is None:
            left_out.append(f"{file.name}: left out (not a known format; give --format)")
        else:
            planned.append((file, name))
    if not path.is_dir() and not planned:
        raise CollectUsageError(left_out[0], f"give --format ({_ready()})")
    return FilePlan(planned, left_out)


def _ready() -> str:
    return ", ".join(name for name in FORMATS if available_parser(name) is not None)


def _reason(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)[:120]


def _offer(item: Conversation | BadRecord, path: Path, batch: Batch, config: CollectConfig) -> None:
    if isinstance(item, Conversation):
        data = spool_entry(item)
        problem = entry_problem(data)
        if problem is None:
            offer_entry(SpoolEntry(path, data), batch, config)
            return
        item = BadRecord(str(item.metadata.get("record") or item.rollout_id), problem)
    batch.warn(item.line())
    batch.note("bad_records", 1)


async def _read_file(path: Path, name: str, batch: Batch, config: CollectConfig) -> None:
    records: Iterator[Conversation | BadRecord] = parser(name).parse(path)
    try:
        while chunk := await asyncio.to_thread(lambda: list(islice(records, _CHUNK))):
            for item in chunk:
                _offer(item, path, batch, config)
    except (OSError, ValueError) as exc:  # the file vanished or changed kind while being read
        batch.warn(f"{path.name}: not read to its end ({_reason(exc)})")
        batch.note("bad_records", 1)


async def read_files(plan: FilePlan, batch: Batch, config: CollectConfig, progress: Progress | None) -> None:
    """Hand every conversation of the planned files to ``batch``; a warning per bad record or file."""
    batch.note("bad_records", 0)
    batch.note("files_left_out", len(plan.left_out))
    for line in plan.left_out:
        batch.warn(line)
    for done, (path, name) in enumerate(plan.files, 1):
        await _read_file(path, name, batch, config)
        if progress is not None:
            progress(done, len(plan.files))
