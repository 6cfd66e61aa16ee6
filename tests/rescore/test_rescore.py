"""`rescore`: a scorer of yours over archived rollouts, as a versioned reward layer; and `--rewards`."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from tracebank.rescore import RescoreConfig, rescore
from tracebank.rescore.errors import RescoreUsageError
from tracebank.transform import TransformConfig, transform
from tracebank.transform.config import PreferenceRules
from tracebank.warehouse.query import run_sql

from tests.fixtures.layers import commit_layer
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
    assert pairs.manifest["counts"]["reward_layer"]["unscored_rollouts"] == len(failing) + len(nones)


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


def _uncollected(rollouts):
    """Every other rollout as if its reward function had crashed: no reward span at all."""
    return [dataclasses.replace(r, reward=None) if i % 2 else r for i, r in enumerate(rollouts)]


def test_rollouts_without_a_collected_reward_are_selected_by_their_layer_score(wh, scorers):
    """The finding: `--rewards` left out every rollout that had no collected reward, even the ones
    the layer scored highest; only rollouts that already had a reward were re-ranked."""
    planned = _uncollected(plan(seed=7))
    commit_03(wh, planned)
    rescore(wh, RescoreConfig(scorer=f"{scorers}:shorter", name="short", workers=1))
    options = {"top_fraction": 0.5, "select_by": "rollout", "val_fraction": 0.0}
    result = transform(wh, TransformConfig(name="sft", rewards="short", **options))
    score = {r.rollout_id: -float(len(r.replies[-1])) for r in planned}
    uncollected = {r.rollout_id for r in planned if r.reward is None}
    rows = run_sql(wh, "SELECT rollout_id, reward FROM dataset_rows WHERE dataset = 'sft'").to_pylist()
    kept = {r["rollout_id"] for r in rows}
    # the recipe's cut over every scored rollout: the best half by score, collected reward or not
    ranked = sorted(score.values(), reverse=True)
    threshold = ranked[max(1, int(len(ranked) * 0.5)) - 1]
    assert kept & uncollected and len(kept) == max(1, int(len(score) * 0.5))
    assert all(score[k] >= threshold for k in kept)
    assert all(r["reward"] == score[r["rollout_id"]] for r in rows)
    calls = sum(len(r.calls) for r in planned if r.rollout_id in kept)
    assert len(rows) == calls  # every call of a kept rollout, including those no reward reached
    layer = result.manifest["counts"]["reward_layer"]
    assert layer["scored_rollouts"] == len(planned) and layer["unscored_rollouts"] == 0
    assert layer["scored_without_collected_reward"] == len(uncollected) > 0
    pairs = transform(wh, TransformConfig(name="p", kind="preference", rewards="short"))
    paired = {
        r["rollout_id"]
        for r in run_sql(
            wh,
            "SELECT chosen_rollout_id AS rollout_id FROM preference_rows UNION "
            "SELECT rejected_rollout_id FROM preference_rows",
        ).to_pylist()
    }
    assert paired & uncollected
    assert pairs.manifest["counts"]["reward_layer"]["scored_without_collected_reward"] == len(uncollected)


def test_a_layer_that_leaves_rollouts_unscored_leaves_them_out_and_counts_them(wh):
    planned = _uncollected(plan(seed=9))
    commit_03(wh, planned)
    scored = {r.rollout_id: float(i) for i, r in enumerate(planned) if i % 3}
    commit_layer(wh, "some", scored)
    result = transform(wh, TransformConfig(name="sft", rewards="some", top_fraction=1.0, val_fraction=0.0))
    rows = run_sql(wh, "SELECT DISTINCT rollout_id FROM dataset_rows WHERE dataset = 'sft'").to_pylist()
    assert {r["rollout_id"] for r in rows} == set(scored)
    layer = result.manifest["counts"]["reward_layer"]
    assert layer["unscored_rollouts"] == len(planned) - len(scored) > 0
    assert f"; {layer['unscored_rollouts']} rollouts unscored by some@v1, 0 rejected)" in result.summary()
    assert layer["scored_without_collected_reward"] == len(
        {r.rollout_id for r in planned if r.reward is None} & set(scored)
    )


EXTREME = """
def extreme(rollout):
    _, _, task, index = rollout.rollout_id.split("-")  # ro-SEED-TASK-INDEX
    if int(task) % 3:
        return rollout.reward
    return {"0": 1e308, "1": -1e308, "2": 10**400}.get(index, rollout.reward)
"""


def _strict(path):
    """``path`` parsed as standard JSON only (NaN, Infinity and -Infinity are not JSON)."""

    def refuse(name):
        raise ValueError(f"{path} holds {name}")

    return json.loads(path.read_text(), parse_constant=refuse)


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_a_scorer_beyond_the_bound_fails_that_rollout_and_margins_stay_finite(wh, tmp_path):
    """The finding: a scorer returning ±1e308 was accepted; pair margins overflowed to inf and the
    dataset manifest was written with ``Infinity`` (not JSON); numpy warned on stderr."""
    planned = plan(seed=5)
    commit_03(wh, planned)
    path = tmp_path / "extreme_scorer.py"
    path.write_text(EXTREME)
    result = rescore(wh, RescoreConfig(scorer=f"{path}:extreme", name="x", workers=1))
    counts = result.record.counts
    assert counts["failed"] == len(planned) - counts["scored"] - counts["unscored"] > 0
    assert all(line.startswith("ValueError: the scorer returned") for line in counts["failures"])
    assert all("within ±1e+100" in line for line in counts["failures"])
    scores = [r["score"] for r in layer_rows(wh, "x") if r["score"] is not None]
    assert scores and all(abs(s) <= 1 for s in scores)  # the layer is written with the rest

    pairs = transform(wh, TransformConfig(name="p", kind="preference", rewards="x"))
    manifest = _strict(pairs.folder / "manifest.json")
    margin = manifest["counts"]["margin"]
    assert all(math.isfinite(margin[k]) for k in ("min", "mean", "max"))


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_a_planted_layer_s_nan_inf_and_huge_scores_are_refused_counted_and_never_used(wh, rollouts):
    """The finding: `transform --rewards` paired NaN with NaN and inf with inf, and
    `--min-reward 0.5` kept NaN rows, when a layer's scores file held them."""
    bad = {"0": float("nan"), "1": float("inf"), "2": -1e300}

    def planted(rid, reward):
        _, _, task, index = rid.split("-")  # ro-SEED-TASK-INDEX
        return reward if int(task) % 3 else bad.get(index, reward)

    scores = {r.rollout_id: planted(r.rollout_id, r.reward) for r in rollouts}
    commit_layer(wh, "planted", scores)
    refused = {rid for rid, s in scores.items() if not (math.isfinite(s) and abs(s) <= 1e100)}
    want = {
        "nan": sum(r[-1] == "0" for r in refused),
        "inf": sum(r[-1] == "1" for r in refused),
        "beyond_range": sum(r[-1] == "2" for r in refused),
    }
    assert all(want.values())

    pairs = transform(wh, TransformConfig(name="p", kind="preference", rewards="planted"))
    rows = run_sql(
        wh,
        "SELECT chosen_rollout_id c, rejected_rollout_id r, chosen_reward cr, rejected_reward rr "
        "FROM preference_rows",
    ).to_pylist()
    assert rows and not {x for row in rows for x in (row["c"], row["r"])} & refused
    assert all(row["cr"] > row["rr"] for row in rows)
    layer = _strict(pairs.folder / "manifest.json")["counts"]["reward_layer"]
    assert layer["refused_scores"] == want

    sft = transform(wh, TransformConfig(name="s", rewards="planted", min_reward=0.5))
    kept = run_sql(wh, "SELECT rollout_id, reward FROM dataset_rows WHERE dataset = 's'").to_pylist()
    assert kept and all(r["reward"] >= 0.5 and r["rollout_id"] not in refused for r in kept)
    assert _strict(sft.folder / "manifest.json")["counts"]["reward_layer"]["refused_scores"] == want
