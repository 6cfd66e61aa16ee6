"""`rescore`: a scorer of yours over archived rollouts, as a versioned reward layer; and `--rewards`."""

from __future__ import annotations

import pytest
from tracebank.rescore import RescoreConfig, rescore
from tracebank.rescore.errors import RescoreUsageError
from tracebank.transform import TransformConfig, transform
from tracebank.transform.config import PreferenceRules
from tracebank.warehouse.query import run_sql

from tests.fixtures.preference import commit_03, oracle_candidates, plan
from tests.transform.preference_oracle import oracle_pairs

SCORERS = '''
def shorter(rollout):
    """Prefers shorter final answers."""
    return -float(len(rollout.final_response or ""))


def flaky(rollout):
    if rollout.rollout_id.endswith("-3"):
        raise ValueError("no good\\nsecond line")
    if rollout.rollout_id.endswith("-2"):
        return None
    assert rollout.task["task"].startswith("t") and rollout.messages[-1]["role"] == "assistant"
    return rollout.reward
'''


@pytest.fixture
def scorers(tmp_path):
    path = tmp_path / "my_scorers.py"
    path.write_text(SCORERS)
    return path


@pytest.fixture
def rollouts(wh):
    planned = plan(seed=5)
    commit_03(wh, planned)
    return planned


def layer_rows(wh, name):
    return run_sql(
        wh, "SELECT rollout_id, score, error FROM reward_scores WHERE layer = ? ORDER BY rollout_id", [name]
    ).to_pylist()


def test_a_scorer_that_prefers_shorter_answers_changes_the_pairs(wh, rollouts, scorers):
    result = rescore(wh, RescoreConfig(scorer=f"{scorers}:shorter", name="short", workers=2))
    assert result.ref == "short@v1" and result.record.counts["scored"] == len(rollouts)
    rows = layer_rows(wh, "short")
    by_id = {r.rollout_id: r for r in rollouts}
    assert [(r["rollout_id"], r["score"]) for r in rows] == [
        (rid, -float(len(by_id[rid].replies[-1]))) for rid in sorted(by_id)
    ]
    again = rescore(wh, RescoreConfig(scorer=f"{scorers}:shorter", name="short"))
    assert again.identical and "identical to short@v1" in again.summary()
    assert run_sql(wh, "SELECT count(DISTINCT version) AS n FROM reward_scores").to_pylist() == [{"n": 1}]

    rules = PreferenceRules(pairing="all")
    collected = transform(wh, TransformConfig(name="p", kind="preference", preference=rules))
    rescored = transform(wh, TransformConfig(name="p", kind="preference", preference=rules, rewards="short"))
    shorter = [
        {**c, "reward": -float(len(by_id[c["rollout_id"]].replies[-1]))}
        for c in oracle_candidates(rollouts, "call")
    ]
    want, _ = oracle_pairs(shorter, None, None, "all")
    got = run_sql(
        wh,
        "SELECT chosen_rollout_id AS c, rejected_rollout_id AS r FROM preference_rows WHERE version = ?",
        [rescored.ref.version],
    ).to_pylist()
    assert [(g["c"], g["r"]) for g in got] == [(c, r) for _, _, c, r in want]
    before = run_sql(
        wh, "SELECT chosen_rollout_id AS c, rejected_rollout_id AS r FROM preference_rows WHERE version = 1"
    ).to_pylist()
    assert before != got
    layer = rescored.record.counts["reward_layer"]
    assert layer["ref"] == "short@v1" and layer["source_hash"] == result.record.source_hash
    assert (
        rescored.manifest["params"]["rewards"] == "short@v1" and "reward_layer" not in collected.record.counts
    )
    same = transform(wh, TransformConfig(name="p", kind="preference", preference=rules, rewards="short@v1"))
    assert same.identical and same.ref == rescored.ref  # deterministic


def test_failures_are_counted_with_their_first_line(wh, rollouts, scorers):
    result = rescore(wh, RescoreConfig(scorer=f"{scorers}:flaky", name="flaky", workers=2))
    counts = result.record.counts
    failing = [r for r in rollouts if r.rollout_id.endswith("-3")]
    nones = [r for r in rollouts if r.rollout_id.endswith("-2")]
    assert counts["failed"] == len(failing) > 0 and counts["unscored"] == len(nones) > 0
    assert counts["failures"] == {"ValueError: no good": len(failing)}
    assert counts["scored"] == len(rollouts) - len(failing) - len(nones)
    rows = {r["rollout_id"]: r for r in layer_rows(wh, "flaky")}
    for r in rollouts:
        row = rows[r.rollout_id]
        if r in failing:
            assert row == {"rollout_id": r.rollout_id, "score": None, "error": "ValueError: no good"}
        elif r in nones:
            assert row["score"] is None and row["error"] is None
        else:
            assert row["score"] == r.reward
    assert "failed (first: ValueError: no good)" in result.summary()
    pairs = transform(wh, TransformConfig(name="p", kind="preference", rewards="flaky"))
    assert pairs.manifest["counts"]["unscored_rollouts"] == len(failing) + len(nones)


def test_a_changed_source_is_a_new_version_and_bad_scorers_are_one_line(wh, rollouts, scorers):
    rescore(wh, RescoreConfig(scorer=f"{scorers}:shorter", name="s"))
    scorers.write_text(SCORERS + "\n# changed\n")
    assert rescore(wh, RescoreConfig(scorer=f"{scorers}:shorter", name="s")).ref == "s@v2"
    with pytest.raises(RescoreUsageError, match="has no function 'nope'"):
        rescore(wh, RescoreConfig(scorer=f"{scorers}:nope", name="s"))
    with pytest.raises(RescoreUsageError, match="cannot import scorer module 'no_such_module'"):
        rescore(wh, RescoreConfig(scorer="no_such_module:f", name="s"))
    with pytest.raises(RescoreUsageError, match="MODULE:FUNCTION"):
        RescoreConfig(scorer="nocolon", name="s").validate()


def test_sft_rows_are_selected_by_the_layer(wh, rollouts, scorers):
    rescore(wh, RescoreConfig(scorer=f"{scorers}:shorter", name="short", workers=1))
    options = {"top_fraction": 0.5, "select_by": "rollout"}
    collected = transform(wh, TransformConfig(name="sft", **options))
    rescored = transform(wh, TransformConfig(name="sft", rewards="short", **options))
    score = {r.rollout_id: -float(len(r.replies[-1])) for r in rollouts}
    rows = run_sql(
        wh, "SELECT rollout_id, reward, version FROM dataset_rows WHERE dataset = 'sft'"
    ).to_pylist()
    kept = {r["rollout_id"] for r in rows if r["version"] == rescored.ref.version}
    assert all(r["reward"] == score[r["rollout_id"]] for r in rows if r["version"] == rescored.ref.version)
    dropped = set(score) - kept
    assert kept and dropped and min(score[k] for k in kept) >= max(score[d] for d in dropped)
    assert kept != {r["rollout_id"] for r in rows if r["version"] == collected.ref.version}
    assert rescored.manifest["params"]["rewards"] == "short@v1"
    assert rescored.manifest["counts"]["reward_layer"]["ref"] == "short@v1"
