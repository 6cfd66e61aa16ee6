"""A small, independent statement of the preference pairing rules (issue 20), written as plainly
as possible: brute force over every two rollouts of a task, no grouping tables."""

from __future__ import annotations

import itertools
from typing import Any


def oracle_pairs(
    candidates: list[dict[str, Any]], min_margin: float | None, k: int | None, pairing: str
) -> tuple[list[tuple[Any, ...]], dict[str, int]]:
    """(pairs as (task, prompt, chosen rollout, rejected rollout), counts)."""
    counts = {"singletons": 0, "differing_prompts": 0, "groups": 0, "ties": 0, "below_margin": 0}
    counts["over_per_task"] = 0
    out: list[tuple[Any, ...]] = []
    for task in sorted({c["task"] for c in candidates}):
        mine = [c for c in candidates if c["task"] == task]
        if len({c["rollout_id"] for c in mine}) == 1:
            counts["singletons"] += 1
            continue
        first: dict[tuple[tuple[int, ...], str], dict[str, Any]] = {}
        for c in sorted(mine, key=lambda c: (c["rollout_id"], c["order"])):
            first.setdefault((tuple(c["prompt"]), c["rollout_id"]), c)
        kept = []
        for prompt in sorted({p for p, _ in first}):
            members = [c for (p, _), c in first.items() if p == prompt]
            if len(members) == 1:
                counts["differing_prompts"] += 1
                continue
            counts["groups"] += 1
            ranked = sorted(members, key=lambda c: (-c["reward"], c["rollout_id"]))
            if pairing == "all":
                compared = list(itertools.combinations(ranked, 2))
            else:
                compared = list(zip(ranked, reversed(ranked), strict=True))[: len(ranked) // 2]
            for a, b in compared:
                if a["reward"] == b["reward"]:
                    counts["ties"] += 1
                elif min_margin is not None and a["reward"] - b["reward"] < min_margin:
                    counts["below_margin"] += 1
                else:
                    kept.append((a["reward"] - b["reward"], (task, prompt, a["rollout_id"], b["rollout_id"])))
        if k is not None:
            by_margin = sorted(kept, key=lambda m: -m[0])  # stable: compared order among equal gaps
            counts["over_per_task"] += max(0, len(kept) - k)
            kept = [m for m in kept if any(m is t for t in by_margin[:k])]
        out += [p for _, p in kept]
    return out, counts
