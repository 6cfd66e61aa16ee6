"""Real training runs on the tiny model (CPU, fixed seed): learning, outputs, record, determinism, masking."""

from __future__ import annotations

import json

import pytest
from tracebank.core.events import Event, MetricLogged
from tracebank.train import TrainConfig, train
from tracebank.warehouse import catalog
from tracebank.warehouse.query import run_sql

from tests.fixtures.datasets import QA_PAIRS, SYSTEM, chat_row, write_dataset
from tests.train.conftest import FAST


@pytest.fixture(scope="module")
def merged_run(qa_wh, tiny_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("merged") / "model"
    events: list[Event] = []
    record = train(
        qa_wh,
        TrainConfig(dataset="qa", base_model=str(tiny_model), output=str(out), **FAST),
        on_event=events.append,
    )
    return record, out, events


@pytest.fixture(scope="module")
def lora_run(qa_wh, tiny_model, tmp_path_factory, merged_run):
    out = tmp_path_factory.mktemp("lora") / "adapter"
    record = train(
        qa_wh, TrainConfig(dataset="qa@v1", base_model=str(tiny_model), output=str(out), save="lora", **FAST)
    )
    return record, out


def _losses(wh, run_id):
    folder, _ = catalog.resolve_run(wh, run_id)
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def test_loss_falls_on_a_memorisable_set(merged_run):
    record, _, events = merged_run
    s = record.summary
    assert record.status == "succeeded"
    assert s["steps"] == 24  # 16 rows / batch 4 = 4 steps per epoch, 6 epochs
    assert s["train_loss_last"] < 0.2 * s["train_loss_first"]
    assert s["eval_loss_best"] < 0.5
    assert s["trained_tokens"] > 0 and s["tokens_per_s"] > 0
    metric_events = [e for e in events if isinstance(e, MetricLogged)]
    assert len([e for e in metric_events if e.metric.split == "eval"]) == 6  # one evaluation per epoch


def test_merged_output_loads_with_transformers_and_answers(merged_run, tokenizer):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, out, _ = merged_run
    assert (out / "model.safetensors").exists() and (out / "tokenizer.json").exists()
    assert not (out / "adapter_config.json").exists()
    model = AutoModelForCausalLM.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    question, answer = QA_PAIRS[0]
    prompt = tok.apply_chat_template(
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
        tokenize=True,
        add_generation_prompt=True,
    )["input_ids"]
    with torch.no_grad():
        generated = model.generate(torch.tensor([prompt]), max_new_tokens=4, do_sample=False)
    text = tok.decode(generated[0, len(prompt) :], skip_special_tokens=True)
    assert text.strip() == answer


def test_run_record_holds_dataset_hash_losses_and_versions(qa_wh, merged_run, tokenizer):
    record, out, _ = merged_run
    manifest = catalog.resolve_dataset(qa_wh, "qa@v1")[2].to_json()
    folder, stored_record = catalog.resolve_run(qa_wh, record.run_id)
    stored = stored_record.to_json()
    assert stored["status"] == "succeeded"
    assert stored["dataset"] == "qa@v1"
    assert stored["content_hash"] == manifest["content_hash"]
    assert stored["output_dir"] == str(out)
    assert stored["hyperparameters"]["lora_r"] == 32 and stored["hyperparameters"]["seed"] == 3407
    assert stored["resolved"] == {
        "backend": "trl",
        "device": "cpu",
        "load_in_4bit": False,
        "optim": "adamw_torch",
        "bf16": False,
        "gradient_checkpointing": False,
        "save_dtype": "float32",
    }
    assert {"torch", "transformers", "trl", "peft"} <= set(stored["libraries"])
    assert stored["data"]["max_length"] == manifest["stats"]["max_length"]
    assert stored["model"]["trainable_params"] > 0
    assert stored["model"]["pad_token_id"] == tokenizer.pad_token_id is not None  # the child's, recorded
    assert stored["best_checkpoint"]["eval_loss"] == pytest.approx(stored["summary"]["eval_loss_best"])
    losses = _losses(qa_wh, record.run_id)
    train_losses = [m["loss"] for m in losses if m["split"] == "train"]
    assert len(train_losses) == 24 and train_losses[0] == stored["summary"]["train_loss_first"]
    # the warehouse views read exactly these files
    table = run_sql(qa_wh, f"SELECT status, dataset FROM runs WHERE run_id = '{record.run_id}'")
    assert table.to_pylist() == [{"status": "succeeded", "dataset": "qa@v1"}]
    n = run_sql(
        qa_wh, f"SELECT count(*) AS n FROM run_metrics WHERE run_id = '{record.run_id}' AND split = 'train'"
    )
    assert n.to_pylist() == [{"n": 24}]
    assert not list((qa_wh.tmp_dir).glob(f"train-{record.run_id}*"))  # scratch removed


def test_the_model_folder_names_its_dataset_version_hash_and_run(qa_wh, merged_run, lora_run):
    """README.md (model card) and tracebank.json travel with the model, merged or LoRA."""
    manifest = catalog.resolve_dataset(qa_wh, "qa@v1")[2]
    for record, out in (merged_run[:2], lora_run):
        prov = json.loads((out / "tracebank.json").read_text())
        assert prov["run_id"] == record.run_id and prov["dataset"] == "qa@v1"
        assert prov["content_hash"] == manifest.content_hash and prov["base_model"] == record.base_model
        card = (out / "README.md").read_text()
        assert f"dataset version: `qa@v1` (content hash `{manifest.content_hash}`)" in card
        assert "More Information Needed" not in card  # PEFT's placeholder card is replaced


def test_lora_save_loads_with_peft(lora_run, tiny_model):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    _, out = lora_run
    assert (out / "adapter_config.json").exists() and (out / "tokenizer.json").exists()
    base = AutoModelForCausalLM.from_pretrained(tiny_model)
    model = PeftModel.from_pretrained(base, out)
    assert any("lora_A" in name for name, _ in model.named_parameters())
    with torch.no_grad():
        assert model(torch.tensor([[1, 2, 3]])).logits.shape == (1, 3, 384)


def test_same_version_same_seed_same_losses(qa_wh, merged_run, lora_run):
    first = [(m["step"], m["split"], m["loss"]) for m in _losses(qa_wh, merged_run[0].run_id)]
    second = [(m["step"], m["split"], m["loss"]) for m in _losses(qa_wh, lora_run[0].run_id)]
    assert first == second  # the save method does not touch training


def test_prompt_tokens_carry_no_loss(tmp_path, tiny_model, tokenizer):
    """The first logged loss equals the cross-entropy over response tokens only, not over the whole row."""
    import torch
    from tracebank.warehouse.location import Warehouse
    from transformers import AutoModelForCausalLM

    wh = Warehouse(tmp_path / "wh").init()
    row = chat_row(tokenizer, *QA_PAIRS[2])
    write_dataset(wh, "one", [row] * 4)  # identical rows: the batch order cannot matter
    record = train(
        wh,
        TrainConfig(
            dataset="one",
            base_model=str(tiny_model),
            output=str(tmp_path / "out"),
            batch_size=4,
            grad_accum=1,
            max_steps=1,
            save="lora",
        ),
    )
    reported = record.summary["train_loss_first"]

    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    ids = torch.tensor([row["input_ids"]])
    with torch.no_grad():
        logits = model(ids).logits[0, :-1]
    targets = torch.tensor(row["labels"][1:])
    masked = torch.nn.functional.cross_entropy(logits, targets, ignore_index=-100).item()
    whole = torch.nn.functional.cross_entropy(logits, ids[0, 1:]).item()
    assert reported == pytest.approx(masked, abs=1e-4)
    assert abs(masked - whole) > 0.1


def test_truncate_trains_on_cut_rows_and_drops_rows_left_without_answer(qa_wh, tiny_model, tmp_path):
    record = train(
        qa_wh,
        TrainConfig(
            dataset="qa",
            base_model=str(tiny_model),
            output=str(tmp_path / "out"),
            max_length=50,
            truncate=True,
            max_steps=2,
            save="lora",
            eval_strategy="no",
            batch_size=4,
            grad_accum=1,
        ),
    )
    assert record.status == "succeeded"
    assert record.data["max_length"] == 50 and record.data["dataset_max_length"] == 55
    assert record.data["truncated_rows"] == 24 and record.data["dropped_rows"] > 0
    assert record.summary["steps"] == 2 and record.summary["evaluations"] == 0


def test_trains_on_a_version_built_by_the_transform_stage(tmp_path, tiny_model, tokenizer):
    """Spans -> collection -> transform -> train: the fixture's rows are what transform builds."""
    import pyarrow.parquet as pq
    from tracebank.warehouse.location import Warehouse

    from tests.fixtures.datasets import qa_rows, transform_dataset

    wh = Warehouse(tmp_path / "wh").init()
    folder, manifest = transform_dataset(wh, "qa", tokenizer, repeat=2, val_fraction=0.25)
    built = [
        r for split in ("train", "validation") for r in pq.read_table(folder / f"{split}.parquet").to_pylist()
    ]
    key = lambda r: (r["input_ids"], r["labels"], r["reward"])  # noqa: E731
    assert sorted(map(key, built)) == sorted(map(key, qa_rows(tokenizer, QA_PAIRS, repeat=2)))

    record = train(
        wh,
        TrainConfig(
            dataset="qa", base_model=str(tiny_model), output=str(tmp_path / "out"), save="lora", **FAST
        ),
    )
    assert record.status == "succeeded" and record.content_hash == manifest["content_hash"]
    assert record.data["rows"] == {"train": 12, "validation": 4}
    assert record.summary["train_loss_last"] < 0.5 * record.summary["train_loss_first"]
    assert record.summary["evaluations"] == 6


def test_early_stopping_keeps_the_best_checkpoint(qa_wh, tiny_model, tmp_path):
    record = train(
        qa_wh,
        TrainConfig(
            dataset="qa",
            base_model=str(tiny_model),
            output=str(tmp_path / "out"),
            save="lora",
            learning_rate=5e-2,
            epochs=20,
            batch_size=4,
            grad_accum=1,
            eval_strategy="steps",
            eval_steps=3,
            early_stopping_patience=1,
        ),
    )
    s = record.summary
    assert s["steps"] < 80  # 20 epochs of 4 steps were allowed
    assert s["steps"] - record.best_checkpoint["step"] == 3  # stopped at the first evaluation that got worse
    assert record.best_checkpoint["eval_loss"] == pytest.approx(s["eval_loss_best"])


def test_report_to_tensorboard_and_run_metrics_both_written(qa_wh, tiny_model, tmp_path):
    """--report-to goes through to TRL; the warehouse's run_metrics is written all the same."""
    config = TrainConfig(
        dataset="qa@v1",
        base_model=str(tiny_model),
        output=str(tmp_path / "model"),
        max_steps=2,
        report_to=("tensorboard",),
        **{**FAST, "epochs": 1},
    )
    record = train(qa_wh, config)
    assert record.status == "succeeded" and record.hyperparameters["report_to"] == ["tensorboard"]
    folder, _ = catalog.resolve_run(qa_wh, record.run_id)
    events = list((folder / "tracker-logs").rglob("events.out.tfevents.*"))
    assert events and all(e.stat().st_size > 0 for e in events)
    assert [m["step"] for m in _losses(qa_wh, record.run_id) if m["split"] == "train"] == [1, 2]


def test_report_to_none_is_refused_with_a_hint():
    with pytest.raises(Exception, match="--report-to takes tracker names"):
        TrainConfig(dataset="qa", base_model="m", output="o", report_to=("none",)).validate()
