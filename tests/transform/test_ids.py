"""Ids as codes while planning: same order as the strings, shared across frames, named back exactly."""

from __future__ import annotations

import random

import polars as pl
from tracebank.transform.ids import CODE, IdNames

ALPHABET = ["a", "b", "Z", "0", "-", "é", "ß", "中", "😀", "\u0000"]


def _ids(rng: random.Random, n: int) -> list[str]:
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 14))) for _ in range(n)]


def test_codes_sort_as_the_ids_do_and_name_back() -> None:
    rng = random.Random(7)
    pool = _ids(rng, 60)
    calls = pl.DataFrame(
        {
            "rollout_id": [rng.choice(pool) for _ in range(300)],
            "response_id": [rng.choice([*pool[:10], None]) for _ in range(300)],
            "n": range(300),
        }
    )
    rewards = pl.DataFrame({"rollout_id": [rng.choice(pool) for _ in range(40)], "value": [1.0] * 40})
    names, (coded_calls, coded_rewards) = IdNames.encode([calls, rewards])

    assert coded_calls.schema["rollout_id"] == CODE and coded_calls.schema["response_id"] == CODE
    # Sorting by codes is sorting by the ids (byte order, which Python's sort also gives).
    by_code = coded_calls.sort("rollout_id", "n").get_column("n").to_list()
    by_id = calls.sort("rollout_id", "n").get_column("n").to_list()
    assert by_code == by_id
    assert sorted(set(calls["rollout_id"])) == names.ids["rollout_id"].to_list()
    # One id, one code, in every frame.
    pairs = pl.concat(
        [
            pl.DataFrame({"id": calls["rollout_id"], "code": coded_calls["rollout_id"]}),
            pl.DataFrame({"id": rewards["rollout_id"], "code": coded_rewards["rollout_id"]}),
        ]
    ).unique()
    assert pairs["id"].n_unique() == pairs["code"].n_unique() == pairs.height
    # Nulls stay null, and naming gives back every id exactly.
    assert coded_calls["response_id"].null_count() == calls["response_id"].null_count()
    assert names.name(coded_calls).equals(calls)
    assert names.name(coded_rewards).equals(rewards)


def test_ids_from_elsewhere_are_coded_or_left_out() -> None:
    names, _ = IdNames.encode([pl.DataFrame({"rollout_id": ["ro-2", "ro-1", "ro-3"]})])
    layer = pl.DataFrame(
        {"rollout_id": ["ro-3", "ro-0", "ro-1", "ro-9", "ro-10"], "score": [3.0, 0.0, 1.0, 9.0, 10.0]}
    )
    coded = names.code(layer, "rollout_id")
    assert coded.get_column("score").to_list() == [3.0, 1.0]
    assert names.name(coded).get_column("rollout_id").to_list() == ["ro-3", "ro-1"]
    assert IdNames().code(layer, "rollout_id").height == 0
