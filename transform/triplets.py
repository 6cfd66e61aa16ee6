"""From silver tables to rewarded calls: upstream's adapter + the recipe's reverse walk.

This is design.md rules 1-5, done on columns instead of Span objects:

1. only the spans of each rollout's latest attempt (largest attempts.sequence_id
   over the chosen collections; a span collected twice counts once), ordered by
   (sequence_id, start_time, position in the collection);
2. usable calls only, the first call of each response id wins;
3. reward spans (silver ``rewards`` without a reject reason, whose value is a usable reward:
   ``transform.rewards.usable_rewards``);
4. each reward, in sequence order, goes to the latest call not yet rewarded
   whose sequence id is smaller (upstream's loop, run per rollout on ids only);
5. walking back from the last call, each call carries the most recent reward;
   calls after the last reward carry none and are dropped.

Only small per-call columns (ids, sequence numbers) are touched in Python;
token lists stay in Arrow/Polars buffers throughout.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
from tracebank.transform.rewards import usable_rewards

ORDER = ["rollout_id", "sequence_id", "start_time", "source_order", "span_index"]


@dataclass
class CallCounts:
    """What happened to the calls and rewards on the way (recorded in the manifest)."""

    rollouts: int = 0
    call_spans: int = 0
    other_agents: int = 0
    calls: int = 0
    duplicate_calls: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    rewards: int = 0
    rewards_rejected: dict[str, int] = field(default_factory=dict)
    unmatched_rewards: int = 0
    rewarded: int = 0
    unrewarded: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def latest_attempts(attempts: pl.DataFrame) -> pl.DataFrame:
    """(rollout_id, attempt_id) of each rollout's latest attempt."""
    return (
        attempts.select("rollout_id", "attempt_id", "sequence_id")
        .unique(["rollout_id", "attempt_id"])
        .sort(["rollout_id", "sequence_id", "attempt_id"])
        .group_by("rollout_id", maintain_order=True)
        .last()
        .select("rollout_id", "attempt_id")
    )


def _latest_only(frame: pl.DataFrame, latest: pl.DataFrame) -> pl.DataFrame:
    """Rows of ``frame`` from latest attempts, each span once (first collection wins)."""
    return (
        frame.join(latest, on=["rollout_id", "attempt_id"], how="semi")
        .sort(["source_order", "span_index"])
        .unique(["rollout_id", "attempt_id", "span_id"], keep="first", maintain_order=True)
        .sort(ORDER, nulls_last=False)
    )


def _match_rewards(calls: pl.DataFrame, rewards: pl.DataFrame) -> np.ndarray:
    """Upstream's matching: each reward to the latest unmatched call with a smaller sequence id.

    Returns the matched reward of each call (NaN: none). Calls are sorted by
    rollout then sequence id, so a rollout's only reward goes to the last call
    before the first call with a sequence id at least the reward's: one
    vectorised search. Rollouts with several rewards walk upstream's loop.
    """
    assigned = np.full(calls.height, np.nan)
    if rewards.height == 0 or calls.height == 0:
        return assigned
    # Row ranges of each rollout's calls (calls are sorted by rollout first).
    bounds = (
        calls.with_row_index("i")
        .group_by("rollout_id", maintain_order=True)
        .agg(pl.col("i").first().alias("lo"), pl.col("i").last().alias("hi"))
        .with_row_index("rank")
    )
    matched = rewards.select("rollout_id", "sequence_id", "value").join(bounds, on="rollout_id", how="inner")
    if matched.height == 0:
        return assigned
    several = matched.get_column("rollout_id").is_duplicated()
    seqs = calls.get_column("sequence_id").to_numpy().astype(np.int64)
    single = matched.filter(~several)
    reward_seqs = single.get_column("sequence_id").to_numpy().astype(np.int64)
    lo_seq = min(int(seqs.min()), int(reward_seqs.min()) if len(reward_seqs) else 0)
    hi_seq = max(int(seqs.max()), int(reward_seqs.max()) if len(reward_seqs) else 0)
    span = hi_seq - lo_seq + 2
    if single.height and span * (bounds.height + 1) < 2**62:
        # One sorted key over (rollout rank, sequence id) for calls and rewards alike.
        rank = np.repeat(
            bounds.get_column("rank").to_numpy().astype(np.int64),
            (bounds.get_column("hi") - bounds.get_column("lo") + 1).to_numpy(),
        )
        call_key = rank * span + (seqs - lo_seq)
        reward_key = single.get_column("rank").to_numpy().astype(np.int64) * span + reward_seqs - lo_seq
        target = np.searchsorted(call_key, reward_key, side="left") - 1
        ok = target >= single.get_column("lo").to_numpy().astype(np.int64)
        assigned[target[ok]] = single.get_column("value").to_numpy()[ok]
        loop = matched.filter(several)
    else:
        loop = matched
    span_ids = calls.get_column("span_id").to_list() if loop.height else []
    seq_list = seqs.tolist()
    for lo, hi, r_seqs, r_vals in (
        loop.group_by("rollout_id", maintain_order=True)
        .agg(pl.col("lo").first(), pl.col("hi").first(), "sequence_id", "value")
        .select("lo", "hi", "sequence_id", "value")
        .iter_rows()
    ):
        taken: set[str] = set()
        for r_seq, r_val in sorted(zip(r_seqs, r_vals, strict=True), key=lambda x: x[0]):
            for i in range(hi, lo - 1, -1):
                if span_ids[i] in taken:
                    continue
                if seq_list[i] < r_seq:
                    taken.add(span_ids[i])
                    assigned[i] = r_val
                    break
    return assigned


def matching_agents(agents: pl.Series, pattern: str) -> list[str]:
    """The distinct agent names ``re.search(pattern, name)`` matches (upstream's agent_match test;
    Python's re, not Polars', so the semantics are upstream's exactly). A call with no agent never
    matches. The pattern is the user's own: a slow one costs once per distinct name."""
    regex = re.compile(pattern)
    return [name for name in agents.drop_nulls().unique().to_list() if regex.search(name)]


def rewarded_calls(
    calls: pl.DataFrame,
    rewards: pl.DataFrame,
    attempts: pl.DataFrame,
    counts: CallCounts,
    keep_unrewarded: bool = False,
    agent: str | None = None,
) -> pl.DataFrame:
    """Every call that carries a reward (rules 1-5), in rollout then call order.

    ``calls``/``rewards`` are silver rows of the chosen collections plus a
    ``source_order`` column (the collection's position); ``attempts`` bronze rows.
    Adds ``reward`` (carried) and ``own_reward`` (matched to this call) columns.
    ``keep_unrewarded`` keeps every usable call, ``reward`` null where none is carried (a reward
    layer gives those their rollout's score); the counts still say what the collected rewards reached.
    ``agent`` keeps only the calls of matching agents, before de-duplication and reward matching, as
    upstream's ``agent_match`` finds calls before it matches rewards to them.
    """
    latest = latest_attempts(attempts)
    calls = _latest_only(calls, latest)
    counts.rollouts = latest.height
    if agent is not None:
        kept = calls.filter(pl.col("agent").is_in(matching_agents(calls.get_column("agent"), agent)))
        counts.other_agents = calls.height - kept.height
        calls = kept
    counts.call_spans = calls.height
    rejected = calls.filter(pl.col("reject_reason").is_not_null())
    counts.rejected = dict(sorted(rejected.group_by("reject_reason").len().iter_rows()))
    usable = calls.filter(pl.col("reject_reason").is_null())
    first = (
        usable.get_column("response_id").is_null()
        | usable.select(pl.struct("rollout_id", "attempt_id", "response_id").is_first_distinct()).to_series()
    )
    counts.duplicate_calls = int(usable.height - first.sum())
    usable = usable.filter(first)
    # upstream then orders the calls by sequence id only (a stable sort of the above)
    counts.calls = usable.height

    rewards = _latest_only(rewards, latest)
    bad = rewards.filter(pl.col("reject_reason").is_not_null())
    counts.rewards_rejected = dict(sorted(bad.group_by("reject_reason").len().iter_rows()))
    rewards, refused = usable_rewards(rewards.filter(pl.col("reject_reason").is_null()), "value")
    counts.rewards_rejected |= {f"{reason}_reward": n for reason, n in refused.items()}
    counts.rewards = rewards.height

    own = _match_rewards(usable, rewards)
    counts.unmatched_rewards = rewards.height - int(np.count_nonzero(~np.isnan(own)))
    out = usable.with_columns(pl.Series("own_reward", own, dtype=pl.Float64).fill_nan(None))
    out = out.with_columns(pl.col("own_reward").backward_fill().over("rollout_id").alias("reward"))
    out = out.with_columns(pl.int_range(pl.len()).over("rollout_id").alias("call_index"))
    counts.rewarded = int(out.get_column("reward").is_not_null().sum())
    counts.unrewarded = counts.calls - counts.rewarded
    return out if keep_unrewarded else out.filter(pl.col("reward").is_not_null())
