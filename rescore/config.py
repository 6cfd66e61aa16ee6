"""Options of one rescore run (recorded in the reward layer's manifest)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from tracebank.rescore.errors import RescoreUsageError
from tracebank.warehouse.layout import validate_name


@dataclass(frozen=True)
class RescoreConfig:
    """Which scorer scores which archived rollouts into which reward layer."""

    scorer: str
    """The scoring function, MODULE:FUNCTION or path/to/file.py:FUNCTION; it gets a ScoredRollout and
    returns a float or None."""

    name: str
    """Reward layer name; the run writes its next version NAME@vN (nothing when identical)."""

    collections: tuple[str, ...] = ()
    """Collection ids whose rollouts are scored; empty means every committed collection."""

    workers: int = max(1, min(4, os.cpu_count() or 1))
    """Processes that run the scorer in parallel."""

    force: bool = False
    """Write a new version even when the scores would be identical to an existing one."""

    def validate(self) -> RescoreConfig:
        """Raise RescoreUsageError on a bad value; return self."""
        validate_name(self.name, "reward layer name")
        for cid in self.collections:
            validate_name(cid, "collection id")
        module, _, function = self.scorer.rpartition(":")
        if not module or not function.isidentifier():
            raise RescoreUsageError(
                f"--scorer must be MODULE:FUNCTION or FILE.py:FUNCTION, got {self.scorer!r}",
                "for example --scorer my_scorers:shorter_is_better",
            )
        if self.workers < 1:
            raise RescoreUsageError(f"--workers must be at least 1, got {self.workers}")
        return self
