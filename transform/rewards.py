"""Which rewards a transform may use, and ``--rewards NAME[@vN]``: a reward layer's scores (from
``tracebank rescore``) in place of the collected final rewards, for SFT and preference versions alike.

Rewards are read from silver tables and reward layers that anyone with write access to the
warehouse may have planted: each is checked as it is read (:func:`usable_rewards`), and a NaN,
an infinity or a number beyond :data:`finite.REWARD_LIMIT` is refused and counted, never ranked,
paired or selected.
"""

from __future__ import annotations

from typing import Any

import polars as pl
from tracebank.warehouse import finite
from tracebank.warehouse.catalog import resolve_reward_layer
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.storage import Storage


def usable_rewards(frame: pl.DataFrame, column: str) -> tuple[pl.DataFrame, dict[str, int]]:
    """The rows of ``frame`` whose ``column`` is null or a usable reward, and how many rows were
    refused for each reason (``nan``, ``inf``, ``beyond_range``; reasons with none are left out)."""
    value = pl.col(column)
    reason = (
        pl.when(value.is_nan())
        .then(pl.lit(finite.NAN))
        .when(value.is_infinite())
        .then(pl.lit(finite.INF))
        .when(value.abs() > finite.REWARD_LIMIT)
        .then(pl.lit(finite.BEYOND_RANGE))
        .otherwise(None)
    )
    flagged = frame.with_columns(reason.alias("_refused"))
    refused = flagged.filter(pl.col("_refused").is_not_null()).get_column("_refused").value_counts()
    counts = {str(r): int(n) for r, n in refused.sort("_refused").iter_rows()}
    return flagged.filter(pl.col("_refused").is_null()).drop("_refused"), counts


def layer_scores(wh: Warehouse, ref: str) -> tuple[pl.DataFrame, dict[str, Any]]:
    """(rollout_id, score) of every rollout the layer scored with a usable score, and what the
    manifest records of it (``refused_scores``: the scores refused, by reason)."""
    resolved, folder, manifest = resolve_reward_layer(wh, ref)
    table = Storage(wh).reward_scores(folder, manifest)
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    frame, refused = usable_rewards(frame, "score")
    # A rollout collected twice was scored twice, with the same record: one score each.
    scored = frame.filter(pl.col("score").is_not_null()).unique("rollout_id", keep="last")
    record = {
        "ref": resolved,
        "scorer": manifest.scorer,
        "source_hash": manifest.source_hash,
        "content_hash": manifest.content_hash,
    }
    if refused:
        record["refused_scores"] = refused
    return scored.select("rollout_id", "score").sort("rollout_id"), record


def scored_only(
    scores: pl.DataFrame, layer: pl.DataFrame, record: dict[str, Any]
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """``scores`` (rollout_id, score: the collected final reward, null where none) with the layer's
    scores instead, for the rollouts the layer scored; the rest are left out. The record gains
    ``scored_rollouts``, ``unscored_rollouts`` and ``scored_without_collected_reward``."""
    rescored = scores.select("rollout_id").join(layer, on="rollout_id", how="inner", maintain_order="left")
    uncollected = scores.filter(pl.col("score").is_null()).join(layer, on="rollout_id", how="semi")
    return rescored, {
        **record,
        "scored_rollouts": rescored.height,
        "unscored_rollouts": scores.height - rescored.height,
        "scored_without_collected_reward": uncollected.height,
    }


def calls_with_layer(
    calls: pl.DataFrame, scores: pl.DataFrame, layer: pl.DataFrame, record: dict[str, Any]
) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, Any]]:
    """The calls of the rollouts the layer scored, each carrying its rollout's layer score as its
    ``reward`` (whether or not the rollout had a collected reward), the rollouts' scores, and what
    the manifest records (:func:`scored_only`). ``scores`` holds every rollout of ``calls``."""
    rescored, recorded = scored_only(scores, layer, record)
    kept = calls.drop("reward").join(
        rescored.rename({"score": "reward"}), on="rollout_id", how="inner", maintain_order="left"
    )
    return kept, rescored, recorded
