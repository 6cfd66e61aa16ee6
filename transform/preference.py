"""Preference pairs from same-task rollouts: which answer to the same prompt was better.

Pure selection over a table of candidates (one per rollout and prompt: a call, or a whole
trajectory from its first prompt), with no warehouse access, so it is tested alone.

- A *task* is what makes rollouts siblings (the rollout input for 0.3, ``data_id`` for 1.0).
  A task with one rollout has nothing to compare (a *singleton*).
- A *group* is the rollouts of one task whose candidates have the same prompt token ids; a
  candidate whose prompt no other rollout of its task shares is left out (*differing prompt*).
  A rollout counts once per group (its first candidate with that prompt).
- Members are ranked by reward (highest first, then rollout id). ``all`` compares every two
  members; ``best-worst`` the best with the worst, the second best with the second worst, ...
  (disjoint pairs). A compared pair is kept when its rewards differ by a strict gap of at least
  ``min_margin`` (any strict gap when None); equal rewards are *ties*, smaller gaps *below margin*.
- ``pairs_per_task`` keeps the K pairs of each task with the largest margins (stable: in the
  order they were compared).

Pairs come out by task, then group (by prompt ids), then in the order they were compared.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

import polars as pl
from tracebank.transform.config import PreferenceRules

#: The columns a candidate table holds.
CANDIDATE_COLUMNS = ("task", "rollout_id", "order", "prompt", "completion", "labels", "reward")

#: The columns of a pair table (the stored rows add nothing else).
PAIR_COLUMNS = (
    "task",
    "prompt_input_ids",
    "chosen_input_ids",
    "chosen_labels",
    "rejected_input_ids",
    "rejected_labels",
    "chosen_reward",
    "rejected_reward",
    "chosen_rollout_id",
    "rejected_rollout_id",
)


@dataclass
class PairCounts:
    """What the selection did (recorded in the version's manifest)."""

    tasks: int = 0
    rollouts: int = 0
    singletons: int = 0
    """Tasks with a single rollout (nothing to compare)."""
    differing_prompts: int = 0
    """Candidates whose prompt no other rollout of their task shares."""
    groups: int = 0
    """(task, prompt) groups of two or more rollouts."""
    compared: int = 0
    ties: int = 0
    below_margin: int = 0
    over_per_task: int = 0
    pairs: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _Member:
    rollout_id: str
    reward: float
    row: int


def _groups(candidates: pl.DataFrame, counts: PairCounts) -> dict[Any, dict[tuple[int, ...], list[_Member]]]:
    """task -> prompt -> members (one per rollout, its first candidate), for tasks of 2+ rollouts."""
    counts.tasks = candidates.get_column("task").n_unique() if candidates.height else 0
    counts.rollouts = candidates.get_column("rollout_id").n_unique() if candidates.height else 0
    per_task = candidates.group_by("task").agg(pl.col("rollout_id").n_unique().alias("n"))
    counts.singletons = int((per_task.get_column("n") == 1).sum())
    multi = set(per_task.filter(pl.col("n") > 1).get_column("task").to_list())
    out: dict[Any, dict[tuple[int, ...], list[_Member]]] = defaultdict(dict)
    ordered = candidates.with_row_index("_row").sort(["rollout_id", "order"])
    for task, rid, prompt, reward, row in ordered.select(
        "task", "rollout_id", "prompt", "reward", "_row"
    ).iter_rows():
        if task not in multi:
            continue
        members = out[task].setdefault(tuple(prompt), [])
        if members and members[-1].rollout_id == rid:
            continue  # the rollout's later candidate with the same prompt
        members.append(_Member(rid, float(reward), int(row)))
    for prompts in out.values():
        for prompt in [p for p, m in prompts.items() if len(m) < 2]:
            counts.differing_prompts += 1
            del prompts[prompt]
        counts.groups += len(prompts)
    return out


def _compared(members: list[_Member], pairing: str) -> list[tuple[_Member, _Member]]:
    ranked = sorted(members, key=lambda m: (-m.reward, m.rollout_id))
    n = len(ranked)
    if pairing == "all":
        return [(ranked[i], ranked[j]) for i in range(n) for j in range(i + 1, n)]
    return [(ranked[k], ranked[n - 1 - k]) for k in range(n // 2)]


def _task_pairs(
    prompts: dict[tuple[int, ...], list[_Member]], rules: PreferenceRules, counts: PairCounts
) -> list[tuple[_Member, _Member]]:
    kept: list[tuple[_Member, _Member]] = []
    for prompt in sorted(prompts):
        for better, worse in _compared(prompts[prompt], rules.pairing):
            counts.compared += 1
            gap = better.reward - worse.reward
            if gap <= 0:
                counts.ties += 1
            elif rules.min_margin is not None and gap < rules.min_margin:
                counts.below_margin += 1
            else:
                kept.append((better, worse))
    if rules.pairs_per_task is not None and len(kept) > rules.pairs_per_task:
        best = sorted(range(len(kept)), key=lambda i: -(kept[i][0].reward - kept[i][1].reward))
        chosen = sorted(best[: rules.pairs_per_task])
        counts.over_per_task += len(kept) - len(chosen)
        kept = [kept[i] for i in chosen]
    return kept


def select_pairs(candidates: pl.DataFrame, rules: PreferenceRules) -> tuple[pl.DataFrame, PairCounts]:
    """The pairs ``rules`` choose among ``candidates`` (see the module docstring), and the counts."""
    counts = PairCounts()
    pairs: list[tuple[_Member, _Member]] = []
    for _task, prompts in sorted(_groups(candidates, counts).items(), key=lambda kv: kv[0]):
        pairs += _task_pairs(prompts, rules, counts)
    counts.pairs = len(pairs)
    return _pair_table(candidates, pairs), counts


def _pair_table(candidates: pl.DataFrame, pairs: list[tuple[_Member, _Member]]) -> pl.DataFrame:
    chosen = candidates[[b.row for b, _ in pairs]] if pairs else candidates.clear()
    rejected = candidates[[w.row for _, w in pairs]] if pairs else candidates.clear()
    return pl.DataFrame(
        {
            "task": chosen.get_column("task"),
            "prompt_input_ids": chosen.get_column("prompt"),
            "chosen_input_ids": chosen.get_column("completion"),
            "chosen_labels": chosen.get_column("labels"),
            "rejected_input_ids": rejected.get_column("completion"),
            "rejected_labels": rejected.get_column("labels"),
            "chosen_reward": chosen.get_column("reward").cast(pl.Float64),
            "rejected_reward": rejected.get_column("reward").cast(pl.Float64),
            "chosen_rollout_id": chosen.get_column("rollout_id"),
            "rejected_rollout_id": rejected.get_column("rollout_id"),
        }
    )
