"""Which rows make the version: filters, per-task selection, the recipe's top fraction, the split.

The default path is the recipe's data step, reproduced with the same
``random.Random`` calls: shuffle, stable sort by reward (highest first), keep
``max(1, int(n * fraction))``, shuffle again. Rows start in the order the
recipe builds them (rollouts by id, each rollout's calls last to first), so a
recipe run seeded the same way keeps the very same rows in the same order.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import polars as pl
from tracebank.transform.config import TransformConfig
from tracebank.transform.rows import RowTokens


@dataclass
class SelectCounts:
    """Rows removed at each step (recorded in the manifest)."""

    below_min_reward: int = 0
    dropped_too_long: int = 0
    dedup: int = 0
    per_task_dropped: int = 0
    not_selected: int = 0
    selected: int = 0
    train: int = 0
    validation: int = 0
    rollouts_train: int = 0
    rollouts_validation: int = 0
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def top_k(n: int, fraction: float) -> int:
    """The recipe's cut: ``max(1, int(n * fraction))``."""
    return max(1, int(n * fraction))


def recipe_order(rewards: list[float], fraction: float, rng: random.Random) -> list[int]:
    """Indices the recipe keeps, in its final (shuffled) order."""
    idx = list(range(len(rewards)))
    rng.shuffle(idx)
    idx.sort(key=lambda i: rewards[i], reverse=True)
    kept = idx[: top_k(len(idx), fraction)]
    rng.shuffle(kept)
    return kept


def rollout_scores(calls: pl.DataFrame) -> pl.DataFrame:
    """Each rollout's final reward: the reward its last rewarded call carries (null: none does)."""
    return (
        calls.sort(["rollout_id", "call_index"])
        .group_by("rollout_id", maintain_order=True)
        .agg(pl.col("reward").drop_nulls().last().alias("score"))
    )


def _best_per_task(scores: pl.DataFrame, k: int, rng: random.Random) -> set[str]:
    """The best ``k`` rollouts of each task (ties broken by the seeded shuffle)."""
    ids = scores.get_column("rollout_id").to_list()
    order = list(range(len(ids)))
    rng.shuffle(order)
    score = scores.get_column("score").to_list()
    task = scores.get_column("task").to_list()
    order.sort(key=lambda i: score[i], reverse=True)
    taken: dict[Any, int] = {}
    keep = set()
    for i in order:
        if taken.get(task[i], 0) < k:
            taken[task[i]] = taken.get(task[i], 0) + 1
            keep.add(ids[i])
    return keep


def select_rows(
    rows: pl.DataFrame, scores: pl.DataFrame, config: TransformConfig, source: RowTokens
) -> tuple[pl.DataFrame, pl.DataFrame, SelectCounts]:
    """(train, validation, counts) from all planned rows (in the recipe's initial order).

    Rows are plans (see ``transform.rows``): only ``--dedup`` needs their tokens.
    """
    counts = SelectCounts()
    rng = random.Random(config.seed)
    if config.min_reward is not None:
        keep = rows.get_column("reward") >= config.min_reward
        counts.below_min_reward = int((~keep).sum())
        rows = rows.filter(keep)
    if config.max_length is not None:
        keep = rows.get_column("length") <= config.max_length
        counts.dropped_too_long = int((~keep).sum())
        rows = rows.filter(keep)
    if config.dedup and rows.height:
        input_ids, _, labels, _ = source.materialize(rows)
        rows = rows.with_row_index("_pos")
        best_first = rows.with_columns(pl.Series("_in", input_ids), pl.Series("_lab", labels)).sort(
            "reward", descending=True, maintain_order=True
        )
        unique = best_first.filter(pl.struct("_in", "_lab").is_first_distinct()).drop("_in", "_lab")
        counts.dedup = rows.height - unique.height
        rows = unique.sort("_pos").drop("_pos")
    if config.per_task is not None and rows.height:
        present = scores.join(rows.select("rollout_id").unique(), on="rollout_id", how="semi")
        keep_ids = _best_per_task(present.sort("rollout_id"), config.per_task, rng)
        keep = rows.get_column("rollout_id").is_in(list(keep_ids))
        counts.per_task_dropped = int((~keep).sum())
        rows = rows.filter(keep)

    if rows.height == 0:
        return rows, rows, counts
    if config.select_by == "rollout":
        present = rows.select("rollout_id").unique()
        ranked = scores.join(present, on="rollout_id", how="semi").sort("rollout_id")
        ids = ranked.get_column("rollout_id").to_list()
        kept_rollouts = {
            ids[i] for i in recipe_order(ranked.get_column("score").to_list(), config.top_fraction, rng)
        }
        chosen = rows.filter(pl.col("rollout_id").is_in(list(kept_rollouts)))
        order = list(range(chosen.height))
        rng.shuffle(order)
        selected = chosen[order]
    else:
        selected = rows[recipe_order(rows.get_column("reward").to_list(), config.top_fraction, rng)]
    counts.selected = selected.height
    counts.not_selected = rows.height - selected.height

    train, validation = _split(selected, config, counts)
    counts.train, counts.validation = train.height, validation.height
    return train, validation, counts


def _split(
    rows: pl.DataFrame, config: TransformConfig, counts: SelectCounts
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Hold out whole rollouts (never single rows) for validation."""
    rollouts = sorted(set(rows.get_column("rollout_id").to_list()))
    n_val = 0
    if config.val_fraction > 0:
        if len(rollouts) < 2:
            counts.notes.append("validation split skipped: fewer than 2 rollouts selected")
        else:
            n_val = min(max(1, round(config.val_fraction * len(rollouts))), len(rollouts) - 1)
    random.Random(f"{config.seed}/validation").shuffle(rollouts)
    held = set(rollouts[:n_val])
    is_val = rows.get_column("rollout_id").is_in(list(held))
    counts.rollouts_validation = n_val
    counts.rollouts_train = len(rollouts) - n_val
    return rows.filter(~is_val), rows.filter(is_val)
