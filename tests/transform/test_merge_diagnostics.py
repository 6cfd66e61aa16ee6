"""Merge diagnostics: the calls a merged version could not merge, why, and where they first differ."""

from __future__ import annotations

from collections import Counter

from tracebank.transform import TransformConfig, transform
from tracebank.transform.agl1_build import mismatch_counts
from tracebank.transform.agl1_rows import Agl1Call, MergeMismatch, first_difference, rollout_rows
from tracebank.transform.config import Agl1Limits
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.query import run_sql

from tests.fixtures.bronze import commit_collection
from tests.fixtures.preference import Planned, commit_agl1
from tests.fixtures.proxy_spans import Call, call_spans, reward_span
from tests.transform.agl1_oracle import rollout_adapter_rows

SYSTEM, END, TOOL = [1, 2, 3], 90, [60, 61]
# Token sequences whose merge fails the ways 0.3's debug mode told apart (1.0.2 calls all "others"):
ROLLOUTS: dict[str, list[tuple[list[int], list[int]]]] = {
    # the template: the chat template closes the previous turn with another special token
    "template": [(SYSTEM + [10, 11], [12, END]), (SYSTEM + [10, 11, 12, 91] + TOOL, [13])],
    # retokenization: the previous reply's text tokenized again as other ids ("ab" -> "a", "b")
    "retoken": [(SYSTEM + [10], [40, 41]), (SYSTEM + [10, 4, 0, 41] + TOOL, [14])],
    # other: a new conversation, and a prompt that is a strict prefix of the context
    "other": [(SYSTEM + [10], [15]), ([7, 8], [16]), ([7], [17])],
    # merges throughout: no diagnostic
    "merged": [(SYSTEM + [10], [18]), (SYSTEM + [10, 18] + TOOL, [19])],
}


def calls_of(pairs: list[tuple[list[int], list[int]]]) -> list[Agl1Call]:
    return [Agl1Call(p, r, span_id=f"s{i}") for i, (p, r) in enumerate(pairs)]


def completed(rollouts: dict[str, list[tuple[list[int], list[int]]]]) -> list[dict]:
    """The rollouts as 1.0's CompletedRollout JSON (what the oracle reads)."""
    return [
        {
            "rollout_id": rid,
            "data_id": rid,
            "step": 0,
            "sample_idx_in_step": i,
            "final_reward": 1.0,
            "triplets": [
                {"prompt": {"token_ids": p}, "response": {"token_ids": r, "log_probs": None}}
                for p, r in pairs
            ],
        }
        for i, (rid, pairs) in enumerate(rollouts.items())
    ]


def ours(rollouts: dict[str, list[tuple[list[int], list[int]]]]) -> list[tuple[str, MergeMismatch]]:
    out = []
    for rid, pairs in rollouts.items():
        found: list[MergeMismatch] = []
        rollout_rows(calls_of(pairs), [1.0], Agl1Limits(level="trajectory"), found)
        out += [(rid, m) for m in found]
    return out


def as_oracle(rid: str, m: MergeMismatch) -> tuple:
    flags = tuple(m.reason == r for r in ("template_mismatch", "retoken_mismatch", "others_mismatch"))
    lengths = (m.prompt_length, m.response_length, m.previous_trace_length, m.current_trace_length)
    return (rid, m.turn_index, *flags, *lengths)


def oracle_tuple(row: dict) -> tuple:
    keys = ["rollout_id", "turn_index", "template_mismatch", "retoken_mismatch", "others_mismatch"]
    keys += ["prompt_length", "response_length", "previous_trace_length", "current_trace_length"]
    return tuple(row[k] for k in keys)


def test_mismatches_equal_what_rollout_adapter_logs():
    logged: list[dict] = []
    metrics: dict[str, int] = {}
    rollout_adapter_rows(
        completed(ROLLOUTS),
        max_prompt_length=64,
        max_response_length=64,
        trace_aggregator_level="trajectory",
        merge_mismatch_rows=logged,
        metrics=metrics,
    )
    found = ours(ROLLOUTS)
    assert Counter(as_oracle(rid, m) for rid, m in found) == Counter(map(oracle_tuple, logged))
    rows = [{"collection_id": "c", "rollout_id": rid, "attempt_id": "0", **vars(m)} for rid, m in found]
    counts = mismatch_counts(rows)
    assert counts == {"template_mismatch": 0, "retoken_mismatch": 0, "others_mismatch": 4, "rollouts": 3}
    assert counts["others_mismatch"] == metrics["training/n_trace_merge_mismatch_rows"]
    assert counts["rollouts"] == metrics["training/n_unmerged_rollouts"]


def test_first_differing_position():
    where = {(rid, m.turn_index): (m.first_diff_position, m.span_id) for rid, m in ours(ROLLOUTS)}
    assert where == {
        ("template", 1): (6, "s1"),  # END vs 91 after the system prompt, 2 prompt and 1 reply tokens
        ("retoken", 1): (4, "s1"),  # 40 became 4, 0
        ("other", 1): (0, "s1"),
        ("other", 2): (1, "s2"),  # [7] is a strict prefix of [7, 8, 16]: it differs where it ends
    }
    assert first_difference([1, 2], [1, 2]) == 2 and first_difference([], [5]) == 0


def _merged_recipe(wh: Warehouse, name: str, rid: str = "r") -> object:
    a = f"{rid}-a1"
    p1, r1 = [1, 2, 3], [4, 5]
    p2, r2 = p1 + r1 + [6, 7], [8, 9]  # merges
    p3, r3 = [1, 2, 9], [22]  # a prefix break at position 2
    p4, r4 = p3 + r3, [23]  # extends, but another reward: a reward break
    spans = (
        call_spans(rid, a, 1, Call(p1, r1), 1.0)
        + call_spans(rid, a, 2, Call(p2, r2), 2.0)
        + call_spans(rid, a, 3, Call(p3, r3), 3.0)
        + [reward_span(rid, a, 4, 1.0, 4.0)]
        + call_spans(rid, a, 5, Call(p4, r4), 5.0)
        + [reward_span(rid, a, 6, 0.5, 6.0)]
    )
    commit_collection(wh, spans)
    return transform(wh, TransformConfig(name=name, merge="trajectory"))


def test_recipe_merge_diagnostics_table_counts_and_summary(tmp_path):
    wh = Warehouse(tmp_path / "w").init()
    rid = "r\x1b[2J'; DROP TABLE x; --"  # a hostile id from a record stays a value
    result = _merged_recipe(wh, "m", rid)
    rows = run_sql(
        wh,
        "SELECT dataset, version, rollout_id, turn_index, reason, first_diff_position, prompt_length, "
        "previous_trace_length FROM merge_diagnostics ORDER BY turn_index",
    ).to_pylist()
    assert rows == [
        {
            "dataset": "m",
            "version": 1,
            "rollout_id": rid,
            "turn_index": 2,
            "reason": "others_mismatch",
            "first_diff_position": 2,
            "prompt_length": 3,
            "previous_trace_length": 9,
        },
        {
            "dataset": "m",
            "version": 1,
            "rollout_id": rid,
            "turn_index": 3,
            "reason": "reward_break",
            "first_diff_position": None,
            "prompt_length": 4,
            "previous_trace_length": 4,
        },
    ]
    diag = result.manifest["counts"]["merged"]["diagnostics"]
    assert diag == {
        "template_mismatch": 0,
        "retoken_mismatch": 0,
        "others_mismatch": 1,
        "reward_break": 1,
        "rollouts": 1,
    }
    files = {f["path"]: f for f in result.manifest["files"]}
    assert files["merge_diagnostics.parquet"]["table"] == "merge_diagnostics"
    assert files["merge_diagnostics.parquet"]["rows"] == 2
    lines = result.record.summary_lines("m@v1", result.folder)
    assert any(line.startswith("unmerged ") and "others_mismatch 1" in line for line in lines)
    # the diagnostics are no rows to train on
    assert sum(len(v) for v in result.record.split_files().values()) == 1
    again = transform(wh, TransformConfig(name="m", merge="trajectory"))
    assert again.identical and run_sql(wh, "SELECT count(*) AS n FROM merge_diagnostics").to_pylist() == [
        {"n": 2}
    ]


def test_unmerged_versions_have_no_diagnostics(tmp_path):
    wh = Warehouse(tmp_path / "w").init()
    _merged_recipe(wh, "m")
    plain = transform(wh, TransformConfig(name="plain"))
    assert "merge_diagnostics.parquet" not in {f["path"] for f in plain.manifest["files"]}
    assert not any(line.startswith("unmerged ") for line in plain.record.summary_lines("plain@v1", "."))


def test_agl1_version_commits_the_diagnostics(tmp_path):
    wh = Warehouse(tmp_path / "w").init()
    planned = [Planned(rid, rid, pairs, reward=1.0) for rid, pairs in ROLLOUTS.items()]
    commit_agl1(wh, planned, tmp_path / "spool")
    result = transform(wh, TransformConfig(name="one", rules="agl1"))
    assert result.manifest["counts"]["merge_diagnostics"] == {
        "template_mismatch": 0,
        "retoken_mismatch": 0,
        "others_mismatch": 4,
        "rollouts": 3,
    }
    got = run_sql(
        wh,
        "SELECT rollout_id, turn_index, first_diff_position FROM merge_diagnostics WHERE dataset = 'one'",
    ).to_pylist()
    assert sorted((r["rollout_id"], r["turn_index"], r["first_diff_position"]) for r in got) == [
        ("other", 1, 0),
        ("other", 2, 1),
        ("retoken", 1, 4),
        ("template", 1, 6),
    ]
    assert any(line.startswith("unmerged ") for line in result.record.summary_lines("one@v1", "."))
