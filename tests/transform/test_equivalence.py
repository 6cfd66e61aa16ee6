"""Default options reproduce upstream's adapter + the recipe's data step exactly."""

from __future__ import annotations

from collections import Counter

import pyarrow.parquet as pq
import pytest
from tracebank.transform import TransformConfig, transform

from tests.fixtures.bronze import commit_collection
from tests.transform.oracle import oracle_rows, row_key, scenario


@pytest.fixture(scope="module")
def sc():
    return scenario(seed=3)


@pytest.fixture
def built(wh, sc):
    cid = commit_collection(wh, sc.spans, rollouts=sc.rollouts(), attempts=sc.attempts)
    return wh, cid


def _rows(result, split="train"):
    return pq.read_table(result.folder / f"{split}.parquet").to_pylist()


def test_default_rows_are_exactly_the_oracle_multiset(built, sc):
    wh, _ = built
    result = transform(wh, TransformConfig(name="eq"))
    ours = _rows(result)
    expected = oracle_rows(sc.latest_spans())
    assert len(ours) == len(expected) > 50
    assert Counter(map(row_key, ours)) == Counter(map(row_key, expected))


def test_same_seed_gives_the_recipe_order_too(built, sc):
    wh, _ = built
    result = transform(wh, TransformConfig(name="eq", seed=11))
    expected = oracle_rows(sc.latest_spans(), seed=11)
    assert [row_key(r) for r in _rows(result)] == [row_key(r) for r in expected]


def test_ids_beyond_ascii_keep_the_recipe_order(wh):
    """Planning sorts ids as integer codes (``transform.ids``): their order must be Python's, which
    upstream's recipe walks rollouts in, for ids in any script and case."""
    marks = ["é", "Z", "a", "中", "😀", "ß", "A", "ő"]
    sc = scenario(seed=4, random_id=lambda i: f"{marks[i % len(marks)]}-{(i * 7919) % 101}")
    commit_collection(wh, sc.spans, rollouts=sc.rollouts(), attempts=sc.attempts)
    result = transform(wh, TransformConfig(name="eq", seed=13))
    expected = oracle_rows(sc.latest_spans(), seed=13)
    assert [row_key(r) for r in _rows(result)] == [row_key(r) for r in expected]
    ids = {r["rollout_id"] for r in _rows(result)}
    assert any(not i.isascii() for i in ids) and ids <= set(sc.latest_spans())


@pytest.mark.parametrize("fraction", [0.5, 0.3, 0.01])
def test_top_fraction_keeps_the_recipe_count_and_reward_cut(built, sc, fraction):
    wh, _ = built
    result = transform(wh, TransformConfig(name="frac", top_fraction=fraction, seed=5))
    ours = _rows(result)
    expected = oracle_rows(sc.latest_spans(), triplet_fraction=fraction, seed=99)
    assert len(ours) == len(expected)
    assert sorted(r["reward"] for r in ours) == sorted(r["reward"] for r in expected)
    assert result.manifest["counts"]["not_selected"] == result.manifest["counts"]["rewarded"] - len(ours)


def test_counts_name_what_happened(built):
    wh, _ = built
    counts = transform(wh, TransformConfig(name="eq")).manifest["counts"]
    assert counts["duplicate_calls"] == 2  # r-dup's second call, r-litellm's raw twin
    assert counts["rejected"] == {"empty_tokens": 2}
    assert counts["unmatched_rewards"] == 1  # r-several's reward before any call
    assert counts["unrewarded"] >= 1 + 3  # r-several's last call, r-noreward's calls
    assert counts["rewarded"] + counts["unrewarded"] == counts["calls"]


def test_provenance_points_at_the_calls_span(built, sc):
    wh, _ = built
    rows = _rows(transform(wh, TransformConfig(name="eq")))
    latest = sc.latest_spans()
    by_id = {s.span_id: s for spans in latest.values() for s in spans}
    for row in rows:
        span = by_id[row["span_id"]]
        assert span.rollout_id == row["rollout_id"] and span.attempt_id == row["attempt_id"]
        assert span.name in ("raw_gen_ai_request", "litellm_request")
    assert not any(r["attempt_id"] == "r-attempts-a1" for r in rows)


def test_a_rollout_collected_twice_and_a_later_attempt(wh, sc):
    """Across collections: each span once, and the latest attempt over all of them."""
    half = [s for s in sc.spans if s.attempt_id != "r-attempts-a2"]
    attempts = [a for a in sc.attempts if a["attempt_id"] != "r-attempts-a2"]
    commit_collection(wh, half, rollouts=sc.rollouts(), attempts=attempts, collection_id="c1")
    commit_collection(wh, sc.spans, rollouts=sc.rollouts(), attempts=sc.attempts, collection_id="c2")
    ours = _rows(transform(wh, TransformConfig(name="two")))
    assert Counter(map(row_key, ours)) == Counter(map(row_key, oracle_rows(sc.latest_spans())))
    only_first = _rows(transform(wh, TransformConfig(name="one", collections=("c1",))))
    assert any(r["attempt_id"] == "r-attempts-a1" for r in only_first)
