"""`train --method dpo`: TRL's DPOTrainer with PEFT, the reference being the base without the adapter."""

from __future__ import annotations

import json
import math

import pytest
from tracebank.train import TrainConfig, train
from tracebank.train.errors import TrainError
from tracebank.transform import TransformConfig, transform
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.query import run_sql

from tests.fixtures.preference import Planned, commit_03

GOOD, BAD = [40, 41, 42, 43], [200, 201, 202, 203]


def toy_rollouts() -> list[Planned]:
    """Six tasks, two rollouts each: the one answering GOOD won, the one answering BAD lost."""
    out = []
    for t in range(6):
        prompt = [10 + t, 20 + t, 30 + t]
        for answer, reward in ((GOOD, 1.0), (BAD, 0.0)):
            out.append(Planned(f"ro-{t}-{reward}", f"t{t}", [(prompt, answer)], ["x"], reward))
    return out


@pytest.fixture(scope="module")
def pref_wh(tmp_path_factory):
    wh = Warehouse(tmp_path_factory.mktemp("dpo-wh") / "warehouse").init()
    commit_03(wh, toy_rollouts())
    transform(wh, TransformConfig(name="prefs", kind="preference"))
    transform(wh, TransformConfig(name="sft"))
    return wh


def dpo_metrics(wh, run_id: str) -> list[dict]:
    return run_sql(
        wh,
        "SELECT step, loss, rewards_chosen, rewards_rejected, rewards_margin, rewards_accuracy "
        "FROM run_metrics WHERE run_id = ? AND split = 'train' ORDER BY step",
        [run_id],
    ).to_pylist()


def run(wh, tiny_model, out, **overrides):
    options = {"dataset": "prefs", "method": "dpo", "seed": 0, "batch_size": 6, "grad_accum": 1}
    options.update(warmup_steps=0, logging_steps=1, **overrides)
    config = TrainConfig(base_model=str(tiny_model), output=str(out), **options)
    return train(wh, config)


def test_first_sigmoid_loss_is_ln2_and_a_few_steps_lower_it(pref_wh, tiny_model, tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    record = run(pref_wh, tiny_model, tmp_path / "model", max_steps=6, learning_rate=2e-2)
    metrics = dpo_metrics(pref_wh, record.run_id)
    first, last = metrics[0], metrics[-1]
    # a fresh LoRA adds B @ A with B = 0: the policy is the reference, every log-ratio is 0
    assert first["step"] == 1 and first["loss"] == pytest.approx(math.log(2), abs=1e-5)
    assert first["rewards_margin"] == pytest.approx(0.0, abs=1e-6)
    assert first["rewards_chosen"] == pytest.approx(0.0, abs=1e-6)
    assert first["rewards_rejected"] == pytest.approx(0.0, abs=1e-6)
    assert len(metrics) == 6 and last["loss"] < first["loss"] - 0.05
    assert last["rewards_margin"] > 0 and last["rewards_accuracy"] == 1.0
    assert record.hyperparameters["method"] == "dpo" and record.hyperparameters["beta"] == 0.1
    assert (tmp_path / "model" / "tracebank.json").is_file()
    # the report draws the margins and accuracies the run recorded
    from tracebank.view import ReportConfig, report

    report(pref_wh, ReportConfig(output=tmp_path / "report.html", runs=(record.run_id,)))
    page = (tmp_path / "report.html").read_text()
    data = json.loads(page.split('id="report-data">')[1].split("</script>")[0].replace("<\\/", "</"))
    curve = next(c for c in data["runs"][0]["curves"] if c["split"] == "train")
    assert curve["margin"] == [m["rewards_margin"] for m in metrics]
    assert curve["accuracy"] == [m["rewards_accuracy"] for m in metrics] and 'id="chart-dpo"' in page


def test_ipo_loss_is_used_and_method_must_fit_the_version(pref_wh, tiny_model, tmp_path):
    record = run(pref_wh, tiny_model, tmp_path / "ipo", max_steps=1, dpo_loss="ipo", beta=0.5)
    first = dpo_metrics(pref_wh, record.run_id)[0]
    # IPO at zero log-ratios: (0 - 1/(2 beta))^2 = 1
    assert first["loss"] == pytest.approx((1 / (2 * 0.5)) ** 2, abs=1e-5)
    with pytest.raises(TrainError, match="preference version; --method sft"):
        run(pref_wh, tiny_model, tmp_path / "x", max_steps=1, method="sft")
    with pytest.raises(TrainError, match="sft version; --method dpo"):
        run(pref_wh, tiny_model, tmp_path / "y", max_steps=1, dataset="sft")
