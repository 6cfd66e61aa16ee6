"""Pre-flight checks: model facts without torch, target matching, the length plan."""

from __future__ import annotations

import pytest
from tracebank.train import preflight
from tracebank.train.config import TrainConfig
from tracebank.train.dataset import open_version, scan_split
from tracebank.train.errors import TrainError
from tracebank.warehouse.location import Warehouse

from tests.fixtures.datasets import QA_PAIRS, qa_rows, write_dataset


def test_model_facts_read_config_and_safetensors_header(tiny_model):
    facts = preflight.model_facts(tiny_model)
    assert (facts.model_type, facts.vocab_size, facts.max_positions) == ("qwen2", 384, 2048)
    leaves = {m.rsplit(".", 1)[-1] for m in facts.matrix_modules}
    assert {
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
        "embed_tokens",
    } <= leaves
    assert "model.layers.1.mlp.down_proj" in facts.matrix_modules


def test_model_facts_refuse_a_folder_without_tokenizer(tmp_path, tiny_model):
    (tmp_path / "config.json").write_text((tiny_model / "config.json").read_text())
    with pytest.raises(TrainError, match="holds no tokenizer"):
        preflight.model_facts(tmp_path)
    with pytest.raises(TrainError, match="does not exist"):
        preflight.model_facts(tmp_path / "missing")


def test_target_matching_follows_peft_suffix_rule():
    names = ["model.layers.0.self_attn.q_proj", "model.layers.0.mlp.up_proj"]
    preflight.check_targets(["q_proj", "self_attn.q_proj", "up_proj"], names, "m")
    preflight.check_targets(["all-linear"], names, "m")
    with pytest.raises(TrainError, match="proj match no module"):
        preflight.check_targets(["proj"], names, "m")  # a substring is not a match


@pytest.fixture
def version(tmp_path, tokenizer):
    wh = Warehouse(tmp_path / "wh").init()
    write_dataset(wh, "qa", qa_rows(tokenizer, QA_PAIRS, repeat=2), validation=qa_rows(tokenizer, QA_PAIRS))
    return open_version(wh, "qa")


def test_scan_finds_lengths_and_first_trained_token(version, tokenizer):
    scan = scan_split(version.split_files()["train"])
    rows = qa_rows(tokenizer, QA_PAIRS, repeat=2)
    assert scan.rows == 16
    assert scan.lengths == [len(r["input_ids"]) for r in rows]
    assert scan.first_trained == [r["labels"].index(next(x for x in r["labels"] if x != -100)) for r in rows]
    assert scan.max_token_id == max(max(r["input_ids"]) for r in rows)


def test_plan_takes_max_length_from_the_dataset(version, tiny_model):
    plan = preflight.plan(TrainConfig("qa", str(tiny_model), "o"), version, preflight.model_facts(tiny_model))
    assert plan.max_length == plan.dataset_max_length == version.manifest["stats"]["max_length"] == 55
    assert plan.rows == {"train": 16, "validation": 8} and plan.keep_rows == {}


def test_plan_truncates_only_when_asked_and_drops_rows_left_without_a_trained_token(version, tiny_model):
    facts = preflight.model_facts(tiny_model)
    with pytest.raises(TrainError, match=r"row\(s\) of qa@v1 are longer than --max-length 50"):
        preflight.plan(TrainConfig("qa", str(tiny_model), "o", max_length=50), version, facts)
    plan = preflight.plan(
        TrainConfig("qa", str(tiny_model), "o", max_length=50, truncate=True), version, facts
    )
    train_scan = scan_split(version.split_files()["train"])
    expected_keep = [i for i, first in enumerate(train_scan.first_trained) if first < 50]
    assert 0 < len(expected_keep) < 16  # some prompts are 50 tokens long, some shorter
    assert plan.keep_rows["train"] == expected_keep
    assert plan.truncated_rows == sum(length > 50 for length in train_scan.lengths) + sum(
        length > 50 for length in scan_split(version.split_files()["validation"]).lengths
    )


def test_plan_refuses_lengths_beyond_the_model(version, tiny_model):
    facts = preflight.model_facts(tiny_model)
    facts.max_positions = 40
    with pytest.raises(TrainError, match="exceeds the model's 40 positions"):
        preflight.plan(TrainConfig("qa", str(tiny_model), "o"), version, facts)
