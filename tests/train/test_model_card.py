"""The model folder carries its provenance: README.md (model card) and tracebank.json."""

from __future__ import annotations

import json

import pytest
from tracebank.train.model_card import LEGACY_MARKER, PROVENANCE_FILE, write_model_card, written_by_train

RECORD = {
    "run_id": "20261130-120000-qa-abcd",
    "dataset": "qa@v3",
    "content_hash": "f" * 64,
    "base_model": "/models/base",
    "backend": "trl",
    "save": "merged_16bit",
    "started_at": "2026-11-30T12:00:00+00:00",
    "hyperparameters": {"learning_rate": 0.0002, "lora_r": 32},
    "data": {"rows": 12, "tokens": 640},
    "libraries": {"trl": "1.15.0"},
    "status": "running",
}


def test_card_and_json_name_the_dataset_version_hash_run_and_base_model(tmp_path):
    write_model_card(tmp_path, RECORD)
    prov = json.loads((tmp_path / "tracebank.json").read_text())
    assert prov["dataset"] == "qa@v3" and prov["content_hash"] == "f" * 64
    assert prov["run_id"] == "20261130-120000-qa-abcd" and prov["base_model"] == "/models/base"
    assert prov["hyperparameters"] == {"learning_rate": 0.0002, "lora_r": 32}
    card = (tmp_path / "README.md").read_text()
    assert card.startswith('---\nbase_model: "/models/base"\nlibrary_name: transformers\n')
    assert "dataset version: `qa@v3` (content hash `" + "f" * 64 + "`)" in card
    assert "| `lora_r` | `32` |" in card


def test_a_placeholder_card_is_replaced(tmp_path):
    (tmp_path / "README.md").write_text("## Model Details\n[More Information Needed]\n")
    write_model_card(tmp_path, RECORD)
    assert "More Information Needed" not in (tmp_path / "README.md").read_text()
    assert json.loads((tmp_path / "tracebank.json").read_text())["run_id"] == RECORD["run_id"]


def test_the_json_marks_the_folder_as_one_train_wrote(tmp_path):
    assert not written_by_train(tmp_path)
    write_model_card(tmp_path, RECORD)
    assert written_by_train(tmp_path)


@pytest.mark.parametrize(
    ("name", "text", "marked"),
    [
        (LEGACY_MARKER, '{"run_id": "20260101-000000-qa-0000", "dataset": "qa@v1"}', True),
        (PROVENANCE_FILE, '{"name": "my own config"}', False),
        (PROVENANCE_FILE, '{"run_id": ""}', False),
        (PROVENANCE_FILE, "[1, 2]", False),
        (PROVENANCE_FILE, "not json", False),
        (LEGACY_MARKER, "\xff\xfe", False),
    ],
)
def test_only_a_file_naming_a_run_marks_a_folder(tmp_path, name, text, marked):
    (tmp_path / name).write_text(text, encoding="latin-1")
    assert written_by_train(tmp_path) is marked


def test_written_by_train_for_a_run_names_that_run_only(tmp_path):
    """`train --resume` replaces only its own run's model folder; any run's will not do."""
    (tmp_path / PROVENANCE_FILE).write_text('{"run_id": "20260101-000000-qa-0000"}')
    assert written_by_train(tmp_path) and written_by_train(tmp_path, run_id="20260101-000000-qa-0000")
    assert not written_by_train(tmp_path, run_id="20260101-000000-qa-ffff")


def test_the_legacy_marker_is_the_output_guards_marker_named_once():
    """A model folder from before tracebank.json holds the output guard's marker: one file name, one
    owner (core.outputs), so a rename there cannot leave train looking for the old one."""
    from pathlib import Path

    from tracebank.core import outputs

    assert LEGACY_MARKER is outputs.MARKER
    source = (Path(__file__).resolve().parents[2] / "train" / "model_card.py").read_text()
    assert f'"{outputs.MARKER}"' not in source
