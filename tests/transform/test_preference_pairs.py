"""Preference pair selection, exact against the independent oracle on synthetic groups."""

from __future__ import annotations

import random

import polars as pl
import pytest
from tracebank.transform.config import PreferenceRules
from tracebank.transform.preference import select_pairs

from tests.transform.preference_oracle import oracle_pairs

PROMPTS = [[1, 2, 3], [1, 2, 4], [7], [1, 2, 3, 9]]


def synthetic(seed: int) -> list[dict]:
    """Tasks of 1-5 rollouts, 1-3 candidates each, prompts from a small pool, rewards that tie."""
    rng = random.Random(seed)
    out = []
    for t in range(rng.randint(3, 9)):
        for r in range(rng.randint(1, 5)):
            reward = rng.choice([0.0, 0.25, 0.5, 1.0, 1.0])
            rid = f"r{t}-{rng.randrange(1000):03d}-{r}"
            for order in range(rng.randint(1, 3)):
                prompt = rng.choice(PROMPTS[:2] if rng.random() < 0.7 else PROMPTS)
                out.append(
                    {
                        "task": f"task {t}",
                        "rollout_id": rid,
                        "order": order,
                        "prompt": prompt,
                        "completion": [rng.randrange(50, 60) for _ in range(rng.randint(1, 4))],
                        "reward": reward,
                    }
                )
    rng.shuffle(out)
    return out


def frame(rows: list[dict]) -> pl.DataFrame:
    rows = [{**r, "labels": r["completion"]} for r in rows]
    return pl.DataFrame(
        rows,
        schema={
            "task": pl.String,
            "rollout_id": pl.String,
            "order": pl.Int64,
            "prompt": pl.List(pl.Int32),
            "completion": pl.List(pl.Int32),
            "labels": pl.List(pl.Int32),
            "reward": pl.Float64,
        },
    )


def as_tuples(pairs: pl.DataFrame) -> list[tuple]:
    return [
        (r["task"], tuple(r["prompt_input_ids"]), r["chosen_rollout_id"], r["rejected_rollout_id"])
        for r in pairs.iter_rows(named=True)
    ]


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("pairing", ["best-worst", "all"])
@pytest.mark.parametrize(("margin", "k"), [(None, None), (0.3, None), (None, 1), (0.2, 2)])
def test_pairs_equal_the_oracle(seed, pairing, margin, k):
    rows = synthetic(seed)
    pairs, counts = select_pairs(
        frame(rows), PreferenceRules(min_margin=margin, pairs_per_task=k, pairing=pairing)
    )
    want, want_counts = oracle_pairs(rows, margin, k, pairing)
    assert as_tuples(pairs) == want
    got = counts.as_dict()
    assert {key: got[key] for key in want_counts} == want_counts
    assert counts.pairs == len(want) == pairs.height
    assert counts.compared == counts.ties + counts.below_margin + counts.pairs + counts.over_per_task
    # the rows carry the chosen and rejected candidates' own tokens and rewards
    by_key = {(r["rollout_id"], tuple(r["prompt"])): r for r in sorted(rows, key=lambda r: -r["order"])}
    for row in pairs.iter_rows(named=True):
        chosen = by_key[(row["chosen_rollout_id"], tuple(row["prompt_input_ids"]))]
        rejected = by_key[(row["rejected_rollout_id"], tuple(row["prompt_input_ids"]))]
        assert row["chosen_input_ids"] == chosen["completion"] == row["chosen_labels"]
        assert row["rejected_input_ids"] == rejected["completion"]
        assert row["chosen_reward"] == chosen["reward"] > row["rejected_reward"] == rejected["reward"]


def test_the_edge_cases_by_hand():
    def c(task, rid, reward, prompt=(1, 2), order=0):
        return {
            "task": task,
            "rollout_id": rid,
            "order": order,
            "prompt": list(prompt),
            "completion": [9],
            "reward": reward,
        }

    rows = [
        c("alone", "a1", 1.0),  # one rollout: a singleton
        c("tie", "t1", 0.5),
        c("tie", "t2", 0.5),  # equal rewards
        c("diff", "d1", 1.0, (1,)),
        c("diff", "d2", 0.0, (2,)),  # prompts differ
        c("gap", "g1", 1.0),
        c("gap", "g2", 0.9),
        c("gap", "g3", 0.0),
        c("gap", "g4", 0.4),
    ]
    pairs, counts = select_pairs(frame(rows), PreferenceRules())
    assert as_tuples(pairs) == [("gap", (1, 2), "g1", "g3"), ("gap", (1, 2), "g2", "g4")]
    assert (counts.singletons, counts.ties, counts.differing_prompts, counts.groups) == (1, 1, 2, 2)
    pairs, counts = select_pairs(frame(rows), PreferenceRules(min_margin=0.6, pairing="all"))
    assert sorted(as_tuples(pairs)) == [
        ("gap", (1, 2), "g1", "g3"),
        ("gap", (1, 2), "g1", "g4"),
        ("gap", (1, 2), "g2", "g3"),
    ]
    assert counts.below_margin == 3  # g1-g2 0.1, g4-g3 0.4, g2-g4 0.5
    pairs, counts = select_pairs(frame(rows), PreferenceRules(pairing="all", pairs_per_task=1))
    assert as_tuples(pairs) == [("gap", (1, 2), "g1", "g3")] and counts.over_per_task == 5


def test_bad_rules_are_named():
    assert PreferenceRules().problems() == []
    bad = PreferenceRules(min_margin=-1, pairs_per_task=0, pairing="best", unit="turn").problems()
    assert [p.split()[0] for p in bad] == ["--min-margin", "--pairs-per-task", "--pairing", "--unit"]
