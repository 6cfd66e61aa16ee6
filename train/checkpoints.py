"""Resumable checkpoints in a run's scratch folder: where they are, which one is whole.

transformers writes ``checkpoint-<step>/`` file by file (weights, optimizer, scheduler, RNG,
trainer state) with no atomic commit, so a process killed while saving leaves a folder that
looks like a checkpoint but is not one. The training child writes :data:`COMPLETE` into a
checkpoint after transformers has finished it; only such folders are resumed from.
"""

from __future__ import annotations

from pathlib import Path

from tracebank.warehouse.bytestore import no_link_between
from tracebank.warehouse.layout import CHECKPOINT_COMPLETE, CHECKPOINTS, scratch_key
from tracebank.warehouse.location import Warehouse

#: Marker file the training child writes last into a finished checkpoint.
COMPLETE = CHECKPOINT_COMPLETE
PREFIX = "checkpoint-"


def run_scratch(wh: Warehouse, run_id: str) -> Path:
    """A run's scratch folder (``tmp/train-<run_id>``): its spec, caches and checkpoints."""
    return wh.root / scratch_key(run_id)


def checkpoints_dir(scratch: Path) -> Path:
    """Where the trainer writes its checkpoints inside a run's scratch folder."""
    return scratch / CHECKPOINTS


def mark_complete(folder: Path) -> None:
    (folder / COMPLETE).write_text("")


def complete_checkpoints(scratch: Path) -> list[tuple[int, Path]]:
    """Whole checkpoints of a run as (step, folder), oldest first."""
    root = checkpoints_dir(scratch)
    if not root.is_dir():
        return []
    found = []
    for folder in root.iterdir():
        step = folder.name.removeprefix(PREFIX)
        # The scratch is inside a warehouse others may write: a checkpoint reached through a link
        # would make a resume load weights from anywhere.
        marker = folder / COMPLETE
        whole = no_link_between(scratch, marker) and marker.is_file() and not marker.is_symlink()
        if folder.name.startswith(PREFIX) and step.isdigit() and not folder.is_symlink() and whole:
            found.append((int(step), folder))
    return sorted(found)


def last_checkpoint(scratch: Path) -> tuple[int, Path] | None:
    """The newest whole checkpoint of a run, or None."""
    found = complete_checkpoints(scratch)
    return found[-1] if found else None
