"""`train --config FILE.yaml` and `runs show RUN --format yaml`: a file equals its flags, flags given
on the command line win, and the printed file of a run replays it to the same losses."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner
from tracebank.warehouse import catalog

from tracebank.cli.main import cli

SINGLE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
FLAGS = [
    "--dataset", "qa", "--lr", "1e-2", "--batch-size", "4", "--grad-accum", "1", "--warmup-steps", "0",
    "--max-steps", "4", "--seed", "0", "--save", "lora", "--target-modules", "q_proj,v_proj",
    "--report-to", "tensorboard", "--eval-strategy", "no",
]  # fmt: skip
#: The same settings as a config file, written the way people write YAML (underscores, lists, a
#: learning rate the flags then override).
CONFIG = """
dataset: qa
learning_rate: 5.0e-3   # overridden by --lr on the command line
batch-size: 4
grad_accum: 1
warmup-steps: 0
max_steps: 4
seed: 0
save: lora
target-modules: [q_proj, v_proj]
report-to: [tensorboard]
eval-strategy: "no"
"""


def _train(wh, *args):
    result = CliRunner().invoke(cli, ["-w", str(wh.root), "train", "--quiet", *args])
    assert result.exit_code == 0, result.output
    run_id = result.stdout.split()[1]
    return run_id, catalog.resolve_run(wh, run_id)[1]


def _losses(wh, run_id):
    folder, _ = catalog.resolve_run(wh, run_id)
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    return [m["loss"] for m in map(json.loads, lines) if m.get("split") == "train"]


@pytest.fixture
def single_thread(monkeypatch):
    for key, value in SINGLE_THREAD.items():
        monkeypatch.setenv(key, value)


def _settings(record):
    return {k: v for k, v in record.hyperparameters.items() if k != "output"}


def test_a_config_file_equals_its_flags_and_replays(qa_wh, tiny_model, tmp_path, single_thread):
    base = ["--base-model", str(tiny_model)]
    flags_id, by_flags = _train(qa_wh, *FLAGS, *base, "--output", str(tmp_path / "a"))
    config = tmp_path / "f.yaml"
    config.write_text(CONFIG)
    overridden = ["--config", str(config), "--lr", "1e-2"]
    file_id, by_file = _train(qa_wh, *overridden, *base, "--output", str(tmp_path / "b"))
    assert _settings(by_file) == _settings(by_flags)
    assert by_file.hyperparameters["target_modules"] == ["q_proj", "v_proj"]
    assert _losses(qa_wh, file_id) == pytest.approx(_losses(qa_wh, flags_id), abs=1e-6)

    shown = CliRunner().invoke(cli, ["-w", str(qa_wh.root), "runs", "show", flags_id, "--format", "yaml"])
    assert shown.exit_code == 0, shown.output
    printed = yaml.safe_load(shown.stdout)
    assert (
        printed["dataset"] == "qa@v1"
        and printed["lr"] == 1e-2
        and printed["target-modules"]
        == [
            "q_proj",
            "v_proj",
        ]
    )
    replay = tmp_path / "replay.yaml"
    replay.write_text(shown.stdout)
    replay_id, replayed = _train(qa_wh, "--config", str(replay), "--output", str(tmp_path / "c"))
    assert _settings(replayed) == {**_settings(by_flags), "dataset": "qa@v1"}
    assert _losses(qa_wh, replay_id) == pytest.approx(_losses(qa_wh, flags_id), abs=1e-6)


@pytest.mark.parametrize(
    "text, message",
    [
        ("dataset: qa\nlearning-rat: 1\n", "has unknown option(s) learning-rat"),
        ("dataset: [qa\n", "is not valid YAML (line 2)"),
        ("- dataset\n", "must be a mapping of option names to values"),
        ("dataset: qa\nbatch-size: many\n", "'many' is not a valid integer"),
    ],
)
def test_a_bad_config_file_is_one_line(qa_wh, tmp_path, text, message):
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    result = CliRunner().invoke(cli, ["-w", str(qa_wh.root), "train", "--config", str(config)])
    assert result.exit_code == 2
    assert message in result.output
    assert result.output.strip().splitlines()[-1].startswith("Error:")
