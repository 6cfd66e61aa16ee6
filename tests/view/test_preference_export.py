"""Preference versions exported as TRL preference rows and OpenAI preference JSONL; TRL trains on them."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner
from tracebank.transform import TransformConfig, transform
from tracebank.view import ExportConfig, export
from tracebank.view.errors import ViewUsageError
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.query import run_sql

from tests.fixtures.preference import commit_03, plan
from tracebank.cli.main import cli


@pytest.fixture(scope="module")
def pref_wh(tmp_path_factory):
    wh = Warehouse(tmp_path_factory.mktemp("pref-view") / "warehouse").init()
    rollouts = plan(seed=3)
    commit_03(wh, rollouts)
    transform(wh, TransformConfig(name="prefs", kind="preference"))
    transform(wh, TransformConfig(name="sft"))
    return wh, {r.rollout_id: r for r in rollouts}


def _jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _reply(planned, prompt_ids):
    """The reply text of the planned rollout's call with this prompt."""
    return next(
        reply for (p, _), reply in zip(planned.calls, planned.replies, strict=True) if p == prompt_ids
    )


def test_both_formats_hold_each_pairs_prompt_and_answers(pref_wh, tmp_path):
    wh, planned = pref_wh
    pairs = run_sql(wh, "SELECT * FROM preference_rows WHERE dataset = 'prefs'").to_pylist()
    trl_out, openai_out = tmp_path / "trl.jsonl", tmp_path / "openai.jsonl"
    result = export(wh, ExportConfig("prefs", trl_out, "trl-preference"))
    assert result.rows == len(pairs) and result.skipped == 0 and "round trip" not in result.summary()
    export(wh, ExportConfig("prefs", openai_out, "openai-preference"))
    for pair, trl_row, openai_row in zip(pairs, _jsonl(trl_out), _jsonl(openai_out), strict=True):
        chosen, rejected = planned[pair["chosen_rollout_id"]], planned[pair["rejected_rollout_id"]]
        prompt = [{"role": "user", "content": f"solve {chosen.task}"}]
        good = [{"role": "assistant", "content": _reply(chosen, pair["prompt_input_ids"])}]
        bad = [{"role": "assistant", "content": _reply(rejected, pair["prompt_input_ids"])}]
        assert trl_row == {"prompt": prompt, "chosen": good, "rejected": bad}
        assert openai_row == {
            "input": {"messages": prompt},
            "preferred_output": good,
            "non_preferred_output": bad,
        }


def test_formats_must_fit_the_versions_kind(pref_wh, tmp_path):
    wh, _ = pref_wh
    with pytest.raises(ViewUsageError, match="is a sft version; --format trl-preference"):
        export(wh, ExportConfig("sft", tmp_path / "a.jsonl", "trl-preference"))
    with pytest.raises(ViewUsageError, match="is a preference version; --format openai"):
        export(wh, ExportConfig("prefs", tmp_path / "b.jsonl", "openai"))
    out = CliRunner().invoke(
        cli,
        ["export", "prefs", "--to", "trl-preference", "-o", str(tmp_path / "c.jsonl"), "-w", str(wh.root)],
    )
    assert out.exit_code == 0, out.output


def test_trl_dpo_trainer_trains_on_the_exported_rows(pref_wh, tiny_model, tmp_path):
    """TRL's own DPOTrainer, given the exported rows as they are; a fresh LoRA starts at ln 2."""
    from datasets import Dataset
    from peft import LoraConfig
    from tracebank.train.dpo import use_plain_log_probs_without_triton
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    wh, _ = pref_wh
    out = tmp_path / "trl.jsonl"
    export(wh, ExportConfig("prefs", out, "trl-preference"))
    use_plain_log_probs_without_triton()  # TRL 1.15's DPO log-probs are a Triton kernel (GPU)
    trainer = DPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(str(tiny_model)),
        processing_class=AutoTokenizer.from_pretrained(str(tiny_model)),
        train_dataset=Dataset.from_list(_jsonl(out)),
        peft_config=LoraConfig(
            r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"
        ),
        args=DPOConfig(
            output_dir=str(tmp_path / "dpo"),
            max_steps=3,
            per_device_train_batch_size=4,
            learning_rate=5e-3,
            report_to="none",
            use_cpu=True,
            save_strategy="no",
            logging_steps=1,
        ),
    )
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 3 and logs[0]["loss"] == pytest.approx(math.log(2), abs=1e-5)
    assert logs[0]["rewards/margins"] == pytest.approx(0.0, abs=1e-6)


def test_show_puts_a_pair_side_by_side_with_both_rewards(pref_wh):
    from tracebank.view import ShowConfig, show

    wh, planned = pref_wh
    first = run_sql(wh, "SELECT * FROM preference_rows WHERE dataset = 'prefs'").to_pylist()[1]
    text = show(wh, ShowConfig(dataset="prefs@v1", row=1))
    chosen, rejected = planned[first["chosen_rollout_id"]], planned[first["rejected_rollout_id"]]
    header = next(line for line in text.splitlines() if line.startswith("chosen (reward"))
    assert header.startswith(f"chosen (reward {first['chosen_reward']:g}, {chosen.rollout_id})")
    assert header.rstrip().endswith(
        f"| rejected (reward {first['rejected_reward']:g}, {rejected.rollout_id})"
    )
    assert f"user: solve {chosen.task}" in text
    with pytest.raises(Exception, match="no pair 999"):
        show(wh, ShowConfig(dataset="prefs@v1", row=999))


def test_report_plots_the_margins_and_shows_pairs(pref_wh, tmp_path):
    wh, _ = pref_wh
    out = tmp_path / "report.html"
    result = CliRunner().invoke(cli, ["report", "--dataset", "prefs", "-o", str(out), "-w", str(wh.root)])
    assert result.exit_code == 0, result.output
    page = out.read_text()
    data = json.loads(page.split('id="report-data">')[1].split("</script>")[0])
    section = data["datasets"][0]
    margins = [
        r["m"]
        for r in run_sql(
            wh, "SELECT chosen_reward - rejected_reward AS m FROM preference_rows WHERE dataset = 'prefs'"
        ).to_pylist()
    ]
    assert section["kind"] == "preference" and section["margins"] == margins
    assert 'id="chart-margin-0"' in page and page.count('<details class="pair"') == len(section["pairs"]) > 0
    assert section["pairs"][0]["chosen_reward"] - section["pairs"][0]["rejected_reward"] == max(margins)
