"""Options of one transform run (every one is recorded in the version's manifest)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from tracebank.transform.errors import TransformUsageError
from tracebank.warehouse.layout import validate_name

SELECT_BY = ("triplet", "rollout")
MERGE = ("none", "trajectory")


@dataclass(frozen=True)
class TransformConfig:
    """What to build and how; the defaults reproduce the upstream recipe (design.md rules 1-7)."""

    name: str
    """Dataset name; the run writes its next version NAME@vN."""

    collections: tuple[str, ...] = ()
    """Collection ids to read; empty means every committed collection."""

    top_fraction: float = 1.0
    """Keep the top max(1, int(n*F)) rows (or rollouts, see --select-by) by reward, ties broken by a
    seeded shuffle. 1.0 everywhere (transform and round), so nothing is dropped unless asked; the
    upstream recipe's train_triplet_fraction is 0.5."""

    seed: int = 0
    """Seed of the tie-breaking shuffle, the final shuffle and the validation split."""

    min_reward: float | None = None
    """Drop rows whose reward is below this before selecting (default: keep all)."""

    select_by: str = "triplet"
    """triplet: rank single rows (the recipe); rollout: rank whole rollouts by their final reward."""

    per_task: int | None = None
    """Keep only the best K rollouts of each task input (rejection sampling; default: all)."""

    val_fraction: float = 0.0
    """Fraction of the selected rollouts (never single rows) written to validation.parquet."""

    max_length: int | None = None
    """Drop rows longer than this many tokens (counted, never truncated)."""

    dedup: bool = False
    """Keep one row of identical input_ids + labels (the highest reward)."""

    merge: str = "none"
    """trajectory: calls that extend the previous call's prompt + response become one row; tokens in
    between are masked with -100."""

    force: bool = False
    """Write a new version even when it would be identical (same content hash) to an existing one."""

    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """Free-form notes recorded in the manifest (not part of the content hash)."""

    def validate(self) -> TransformConfig:
        """Raise TransformUsageError on a bad value; return self."""
        validate_name(self.name, "dataset name")
        for cid in self.collections:
            validate_name(cid, "collection id")
        if not (0.0 < self.top_fraction <= 1.0) or math.isnan(self.top_fraction):
            raise TransformUsageError(f"--top-fraction must be in (0, 1], got {self.top_fraction}")
        if not (0.0 <= self.val_fraction < 1.0):
            raise TransformUsageError(f"--val-fraction must be in [0, 1), got {self.val_fraction}")
        if self.select_by not in SELECT_BY:
            raise TransformUsageError(f"--select-by must be one of {', '.join(SELECT_BY)}")
        if self.merge not in MERGE:
            raise TransformUsageError(f"--merge must be one of {', '.join(MERGE)}")
        if self.per_task is not None and self.per_task < 1:
            raise TransformUsageError(f"--per-task must be at least 1, got {self.per_task}")
        if self.max_length is not None and self.max_length < 1:
            raise TransformUsageError(f"--max-length must be at least 1, got {self.max_length}")
        if self.min_reward is not None and not math.isfinite(self.min_reward):
            raise TransformUsageError(f"--min-reward must be a finite number, got {self.min_reward}")
        return self

    def params(self) -> dict[str, Any]:
        """Every option as the manifest records it (collections sorted)."""
        out = asdict(self)
        out.pop("extra")
        out.pop("force")  # says whether to write, not what the rows are
        out["collections"] = sorted(self.collections)
        return out
