"""Each option beyond the anchor does what its help says (and is counted)."""

from __future__ import annotations

import math
from collections import Counter

import pyarrow.parquet as pq
import pytest
from tracebank.transform import TransformConfig, transform
from tracebank.warehouse.location import Warehouse

from tests.fixtures.bronze import commit_collection
from tests.fixtures.proxy_spans import Call, call_spans, random_rollout_spans, reward_span
from tests.transform.oracle import Scenario, oracle_rows, row_key, scenario


@pytest.fixture(scope="module")
def sc():
    return scenario(seed=7, n_random=40)


@pytest.fixture(scope="module")
def wh(tmp_path_factory, sc):
    wh = Warehouse(tmp_path_factory.mktemp("opts") / "warehouse").init()
    commit_collection(wh, sc.spans, rollouts=sc.rollouts(), attempts=sc.attempts)
    return wh


@pytest.fixture(scope="module")
def reference(sc):
    return oracle_rows(sc.latest_spans())


def _rows(result, split="train"):
    path = result.folder / f"{split}.parquet"
    return pq.read_table(path).to_pylist() if path.exists() else []


def _task(sc, rollout_id):
    return repr(sc.inputs[rollout_id])


def test_min_reward_drops_low_rows_before_selection(wh, reference):
    result = transform(wh, TransformConfig(name="minr", min_reward=0.5))
    rows = _rows(result)
    assert rows and all(r["reward"] >= 0.5 for r in rows)
    assert Counter(map(row_key, rows)) == Counter(row_key(r) for r in reference if r["reward"] >= 0.5)
    assert result.manifest["counts"]["below_min_reward"] == sum(r["reward"] < 0.5 for r in reference)


def _final_scores(rows, sc):
    """Each rollout's final reward: the reward its last (highest sequence) rewarded call carries."""
    seq_of = {s.span_id: s.sequence_id for s in sc.spans}
    last = {}
    for r in rows:
        seq = seq_of[r["span_id"]]
        if r["rollout_id"] not in last or seq > last[r["rollout_id"]][0]:
            last[r["rollout_id"]] = (seq, r["reward"])
    return {rid: v for rid, (_, v) in last.items()}


@pytest.mark.parametrize("fraction", [0.5, 0.25])
def test_select_by_rollout_keeps_the_best_whole_rollouts(wh, sc, fraction):
    result = transform(wh, TransformConfig(name="byroll", select_by="rollout", top_fraction=fraction, seed=3))
    rows = _rows(result)
    all_rows = _rows(transform(wh, TransformConfig(name="all")))
    per_rollout = Counter(r["rollout_id"] for r in all_rows)
    kept = Counter(r["rollout_id"] for r in rows)
    assert all(kept[r] == per_rollout[r] for r in kept)  # whole rollouts only
    assert len(kept) == max(1, int(len(per_rollout) * fraction))
    score = _final_scores(all_rows, sc)
    assert min(score[r] for r in kept) >= max(score[r] for r in score if r not in kept)
    assert result.manifest["counts"]["not_selected"] == len(all_rows) - len(rows)


def test_per_task_keeps_the_best_k_rollouts_of_each_task(wh, sc):
    result = transform(wh, TransformConfig(name="pertask", per_task=2))
    kept = {r["rollout_id"] for r in _rows(result)}
    all_rows = _rows(transform(wh, TransformConfig(name="all2")))
    score = _final_scores(all_rows, sc)
    tasks = {_task(sc, rid) for rid in score}
    assert len(tasks) > 5
    for task in tasks:
        members = [rid for rid in score if _task(sc, rid) == task]
        chosen = [rid for rid in members if rid in kept]
        assert len(chosen) == min(2, len(members))
        dropped = [rid for rid in members if rid not in kept]
        if dropped:
            assert min(score[r] for r in chosen) >= max(score[r] for r in dropped)
    dropped_rows = sum(1 for r in all_rows if r["rollout_id"] not in kept)
    assert result.manifest["counts"]["per_task_dropped"] == dropped_rows > 0


def test_val_fraction_splits_by_rollout(wh, reference):
    result = transform(wh, TransformConfig(name="val", val_fraction=0.25, seed=1))
    train, val = _rows(result), _rows(result, "validation")
    assert train and val
    assert not {r["rollout_id"] for r in train} & {r["rollout_id"] for r in val}
    n_roll = len({r["rollout_id"] for r in train + val})
    assert len({r["rollout_id"] for r in val}) == round(0.25 * n_roll)
    assert Counter(map(row_key, train + val)) == Counter(map(row_key, reference))
    files = {f["split"]: f for f in result.manifest["files"]}
    assert files["validation"]["rows"] == len(val) and files["train"]["rows"] == len(train)


def test_max_length_drops_and_counts_never_truncates(wh, reference):
    limit = sorted(len(r["input_ids"]) for r in reference)[len(reference) // 2]
    result = transform(wh, TransformConfig(name="maxlen", max_length=limit))
    rows = _rows(result)
    assert rows and max(len(r["input_ids"]) for r in rows) <= limit
    short = [r for r in reference if len(r["input_ids"]) <= limit]
    assert Counter(map(row_key, rows)) == Counter(map(row_key, short))
    assert result.manifest["counts"]["dropped_too_long"] == len(reference) - len(short)


def test_dedup_keeps_one_of_identical_rows(tmp_path):
    wh = Warehouse(tmp_path / "w").init()
    sc = Scenario()
    for i, reward in enumerate([0.2, 0.9, 0.5]):  # three rollouts with the very same call
        r, a = f"r{i}", f"r{i}-a1"
        spans = call_spans(r, a, 1, Call([5, 6, 7], [8, 9]), 1.0) + [reward_span(r, a, 2, reward, 2.0)]
        sc.add(r, spans, a)
    r, a = "other", "other-a1"
    sc.add(r, call_spans(r, a, 1, Call([1, 2], [3]), 1.0) + [reward_span(r, a, 2, 0.1, 2.0)], a)
    commit_collection(wh, sc.spans, rollouts=sc.rollouts(), attempts=sc.attempts)
    plain = _rows(transform(wh, TransformConfig(name="nodedup")))
    result = transform(wh, TransformConfig(name="dedup", dedup=True))
    rows = _rows(result)
    assert len(plain) == 4 and len(rows) == 2
    assert result.manifest["counts"]["dedup"] == 2
    assert sorted(r["reward"] for r in rows) == [0.1, 0.9]  # the best of the identical ones stays


def _labelled(row):
    return [t for t, lab in zip(row["input_ids"], row["labels"], strict=True) if lab != -100]


def test_merge_trajectory_trains_on_the_same_response_tokens(wh, sc):
    unmerged = transform(wh, TransformConfig(name="unmerged"))
    merged = transform(wh, TransformConfig(name="merged", merge="trajectory"))
    seq_of = {s.span_id: s.sequence_id for s in sc.spans}
    flat = {}
    for name, result in (("unmerged", unmerged), ("merged", merged)):
        per_rollout = {}
        for row in sorted(_rows(result), key=lambda r: seq_of[r["span_id"]]):
            per_rollout.setdefault(row["rollout_id"], []).extend(_labelled(row))
        flat[name] = per_rollout
    assert flat["merged"] == flat["unmerged"]
    counts = merged.manifest["counts"]["merged"]
    rows_u, rows_m = _rows(unmerged), _rows(merged)
    assert counts["rows"] == len(rows_m) < len(rows_u) == counts["calls"]
    saved = sum(len(r["input_ids"]) for r in rows_u) - sum(len(r["input_ids"]) for r in rows_m)
    assert counts["tokens_saved"] == saved > 0
    assert merged.manifest["stats"]["trained_tokens"] == unmerged.manifest["stats"]["trained_tokens"]
    print(
        f"\n--merge trajectory: {len(rows_u)} rows -> {len(rows_m)} rows, "
        f"{saved:,} of {sum(len(r['input_ids']) for r in rows_u):,} tokens saved "
        f"({saved / sum(len(r['input_ids']) for r in rows_u):.0%})"
    )


def test_merge_masks_the_tokens_in_between_and_counts_prefix_breaks(tmp_path):
    wh = Warehouse(tmp_path / "w").init()
    r, a = "r", "r-a1"
    p1, r1 = [1, 2, 3], [4, 5]
    tool = [6, 7]
    p2, r2 = p1 + r1 + tool, [8, 9]
    p3, r3 = [20, 21], [22]  # does not extend: a prefix break
    spans = (
        call_spans(r, a, 1, Call(p1, r1), 1.0)
        + call_spans(r, a, 2, Call(p2, r2), 2.0)
        + call_spans(r, a, 3, Call(p3, r3), 3.0)
        + [reward_span(r, a, 4, 1.0, 4.0)]
    )
    commit_collection(wh, spans)
    result = transform(wh, TransformConfig(name="m", merge="trajectory"))
    rows = sorted(_rows(result), key=lambda row: len(row["input_ids"]), reverse=True)
    assert rows[0]["input_ids"] == p2 + r2
    assert rows[0]["labels"] == [-100] * 3 + r1 + [-100] * 2 + r2
    assert rows[0]["attention_mask"] == [1] * len(p2 + r2)
    assert rows[1]["input_ids"] == p3 + r3 and rows[1]["labels"] == [-100, -100] + r3
    assert result.manifest["counts"]["merged"]["prefix_breaks"] == 1


def test_seed_changes_order_not_content(wh):
    a = _rows(transform(wh, TransformConfig(name="s1", seed=1)))
    b = _rows(transform(wh, TransformConfig(name="s2", seed=2)))
    assert [row_key(r) for r in a] != [row_key(r) for r in b]
    assert Counter(map(row_key, a)) == Counter(map(row_key, b))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"top_fraction": 0.0},
        {"top_fraction": 1.5},
        {"top_fraction": math.nan},
        {"val_fraction": 1.0},
        {"select_by": "span"},
        {"merge": "all"},
        {"per_task": 0},
        {"max_length": 0},
        {"min_reward": math.inf},
        {"name": "../x"},
    ],
)
def test_bad_options_are_usage_errors(wh, kwargs):
    from tracebank.core.errors import UsageError

    with pytest.raises(UsageError):
        transform(wh, TransformConfig(**{"name": "bad", **kwargs}))


def test_random_rollouts_helper_is_deterministic():
    import random

    a = random_rollout_spans("r", "a", random.Random(1), reward=1.0)
    b = random_rollout_spans("r", "a", random.Random(1), reward=1.0)
    assert [s.attributes.get("llm.hosted_vllm.prompt_token_ids") for s in a] == [
        s.attributes.get("llm.hosted_vllm.prompt_token_ids") for s in b
    ]
