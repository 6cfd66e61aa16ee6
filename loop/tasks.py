"""Task files of a round: one JSON task a line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracebank.loop.errors import LoopUsageError


def load_tasks(path: str | Path) -> list[Any]:
    """The tasks of a JSONL file (one JSON value per line; blank lines skipped)."""
    import json

    path = Path(path)
    if not path.is_file():
        raise LoopUsageError(
            f"tasks file {path} does not exist", "pass --tasks a JSONL file, one task per line"
        )
    tasks = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                tasks.append(json.loads(line))
            except ValueError as exc:
                raise LoopUsageError(f"{path}:{n} is not JSON: {exc}", "one JSON task per line") from None
    if not tasks:
        raise LoopUsageError(f"tasks file {path} has no tasks", "one JSON task per line")
    return tasks
