"""`transform --kind preference` on real 0.3 and 1.0 collections: the stored pairs are the oracle's."""

from __future__ import annotations

import pytest
from tracebank.transform import TransformConfig, transform
from tracebank.transform.config import PreferenceRules
from tracebank.transform.errors import EmptyDatasetError, TransformUsageError
from tracebank.warehouse.query import run_sql

from tests.fixtures.preference import commit_03, commit_agl1, oracle_candidates, plan
from tests.transform.preference_oracle import oracle_pairs

RULES = [
    PreferenceRules(),
    PreferenceRules(pairing="all", min_margin=0.5),
    PreferenceRules(pairing="all", pairs_per_task=2, unit="trajectory"),
    PreferenceRules(unit="trajectory"),
]


def stored_pairs(wh, name: str, version: int) -> list[dict]:
    return run_sql(
        wh, "SELECT * FROM preference_rows WHERE dataset = ? AND version = ?", [name, version]
    ).to_pylist()


@pytest.fixture(params=["agl03", "agl1"])
def collected(request, wh, tmp_path):
    rollouts = plan(seed=3)
    if request.param == "agl03":
        commit_03(wh, rollouts)
    else:
        commit_agl1(wh, rollouts, tmp_path / "spool")
    return request.param, rollouts


@pytest.mark.parametrize("rules", RULES, ids=["default", "all-margin", "all-k-trajectory", "trajectory"])
def test_stored_pairs_are_the_oracles(collected, wh, rules):
    source, rollouts = collected
    result = transform(wh, TransformConfig(name="prefs", kind="preference", preference=rules))
    candidates = oracle_candidates(rollouts, rules.unit)
    want, want_counts = oracle_pairs(candidates, rules.min_margin, rules.pairs_per_task, rules.pairing)
    assert want, "the plan must give pairs"
    rows = stored_pairs(wh, "prefs", result.ref.version)
    got = [(r["chosen_rollout_id"], r["rejected_rollout_id"], tuple(r["prompt_input_ids"])) for r in rows]
    assert got == [(c, w, p) for _, p, c, w in want]
    by_key = {(c["rollout_id"], tuple(c["prompt"])): c for c in reversed(candidates)}
    for row in rows:
        chosen = by_key[(row["chosen_rollout_id"], tuple(row["prompt_input_ids"]))]
        rejected = by_key[(row["rejected_rollout_id"], tuple(row["prompt_input_ids"]))]
        assert (row["chosen_input_ids"], row["chosen_labels"]) == (chosen["completion"], chosen["labels"])
        assert (row["rejected_input_ids"], row["rejected_labels"]) == (
            rejected["completion"],
            rejected["labels"],
        )
        assert row["chosen_reward"] == chosen["reward"] > row["rejected_reward"] == rejected["reward"]
        assert (row["task"] == chosen["task"]) if source == "agl1" else (chosen["task"] in row["task"])
    manifest = result.manifest
    assert manifest["params"]["kind"] == "preference" and manifest["rows"] == len(want)
    assert {k: manifest["counts"][k] for k in want_counts} == want_counts
    assert manifest["counts"]["pairs"] == len(want) and manifest["files"][0]["table"] == "preference_rows"
    again = transform(wh, TransformConfig(name="prefs", kind="preference", preference=rules))
    assert again.identical and again.ref.version == result.ref.version
    assert "identical to prefs@v" in again.summary()


def test_summary_and_sft_rows_stay_apart(wh):
    commit_03(wh, plan(seed=3))
    pairs = transform(wh, TransformConfig(name="prefs", kind="preference"))
    sft = transform(wh, TransformConfig(name="sft"))
    assert pairs.summary().startswith(f"wrote prefs@v1: {pairs.record.rows} pairs from ")
    assert "kind" not in sft.manifest["params"]  # an SFT version's params (and hash) are as before
    datasets = run_sql(wh, "SELECT DISTINCT dataset FROM dataset_rows").to_pylist()
    assert datasets == [{"dataset": "sft"}]


def test_no_pairs_and_wrong_options_are_one_line(wh):
    commit_03(wh, [r for r in plan(seed=3) if r.rollout_id.endswith("-0")])  # one rollout a task
    with pytest.raises(EmptyDatasetError, match="no pairs for prefs"):
        transform(wh, TransformConfig(name="prefs", kind="preference"))
    with pytest.raises(TransformUsageError, match="--top-fraction"):
        TransformConfig(name="p", kind="preference", top_fraction=0.5).validate()
    with pytest.raises(TransformUsageError, match="apply to --kind preference"):
        TransformConfig(name="p", preference=PreferenceRules(pairing="all")).validate()
    with pytest.raises(TransformUsageError, match="--min-margin"):
        TransformConfig(name="p", kind="preference", preference=PreferenceRules(min_margin=-1)).validate()


def test_rollouts_without_a_task_are_never_grouped(wh):
    rollouts = plan(seed=3)
    commit_03(wh, rollouts, with_task=False)
    with pytest.raises(
        EmptyDatasetError, match=f"{len(rollouts)} rewarded rollouts in {len(rollouts)} tasks"
    ):
        transform(wh, TransformConfig(name="prefs", kind="preference"))
