"""`tracebank train` and `runs list|show` through CliRunner (`inspect`: tests/view/test_inspection.py)."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from tests.cli_args import cli_args
from tracebank.cli.main import cli


def invoke(position, wh, *args):
    return CliRunner().invoke(cli, cli_args(wh.root, position, *args))


@pytest.fixture(scope="module")
def cli_run(qa_wh, tiny_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "model"
    result = invoke(
        "before",
        qa_wh,
        "train",
        "--dataset",
        "qa",
        "--base-model",
        str(tiny_model),
        "--output",
        str(out),
        "--epochs",
        "2",
        "--lr",
        "1e-2",
        "--batch-size",
        "4",
        "--grad-accum",
        "1",
        "--warmup-steps",
        "0",
        "--save",
        "lora",
    )
    return result, out


def test_train_streams_progress_and_ends_with_one_summary_line(cli_run):
    result, out = cli_run
    assert result.exit_code == 0, result.output
    # progress goes to stderr, each line timed (CliRunner's stderr is no terminal); stdout is the result
    timed = result.stderr.splitlines()
    assert all(re.match(r"\[ *\d+\.\ds\] ", line) for line in timed), timed
    lines = [line.split("] ", 1)[1] for line in timed] + result.stdout.splitlines()
    assert len(result.stdout.splitlines()) == 1
    run_id = re.fullmatch(r"run (\S+): training on qa@v1", lines[0]).group(1)
    assert lines[1] == "checked: 16 train, 8 validation rows, max length 55 tokens"
    assert re.fullmatch(
        r"backend trl on cpu \(fp32, adamw_torch\): [\d,]+ trainable of [\d,]+ parameters "
        r"\([\d.]+%\)",
        lines[2],
    )
    steps = [line for line in lines if line.startswith("step ")]
    assert [s.split()[1] for s in steps] == [f"{i}/8" for i in range(1, 9)]
    assert len([line for line in lines if line.startswith("eval at step ")]) == 2
    assert lines[-2] == "saved lora"
    assert re.fullmatch(
        rf"run {run_id} succeeded: loss \d+\.\d{{4}} -> \d+\.\d{{4}}, eval best \d+\.\d{{4}}, "
        rf"8 steps, [\d,]+ tokens/s, output {re.escape(str(out))}",
        lines[-1],
    )
    assert (out / "adapter_config.json").exists()


def test_unknown_dataset_is_one_line_on_stderr(qa_wh, tiny_model, tmp_path, warehouse_position):
    result = invoke(
        warehouse_position,
        qa_wh,
        "train",
        "--dataset",
        "nope",
        "--base-model",
        str(tiny_model),
        "--output",
        str(tmp_path / "o"),
    )
    assert result.exit_code == 1
    assert result.stderr == (
        f"Error: no dataset named 'nope' in {qa_wh.root} (known datasets: qa; "
        "build one with `tracebank transform --dataset nope`)\n"
    )


def test_bad_hyperparameter_exits_2(qa_wh, tiny_model, tmp_path, warehouse_position):
    result = invoke(
        warehouse_position,
        qa_wh,
        "train",
        "--dataset",
        "qa",
        "--base-model",
        str(tiny_model),
        "--output",
        str(tmp_path / "o"),
        "--lr",
        "-1",
    )
    assert result.exit_code == 2
    assert result.stderr == "Error: learning rate must be positive, got -1.0\n"


def test_failed_run_exits_non_zero_with_one_line(qa_wh, tmp_path, warehouse_position):
    model = tmp_path / "not-a-model"
    model.mkdir()
    result = invoke(
        warehouse_position,
        qa_wh,
        "train",
        "--dataset",
        "qa",
        "--base-model",
        str(model),
        "--output",
        str(tmp_path / "o"),
    )
    assert result.exit_code == 1
    # progress (on stderr) came first; the error is the last line, and stdout stays empty
    assert result.stdout == ""
    assert result.stderr.endswith(
        f"\nError: {model} has no config.json (is this a Hugging Face model folder?)\n"
    )


def test_runs_list_and_show(qa_wh, cli_run, warehouse_position):
    listing = invoke(warehouse_position, qa_wh, "runs", "list")
    assert listing.exit_code == 0
    lines = listing.stdout.splitlines()
    assert lines[0].split() == [
        "run_id",
        "status",
        "dataset",
        "backend",
        "steps",
        "train_loss",
        "eval_loss_best",
        "tokens_per_s",
        "started_at",
    ]
    statuses = [line.split()[1] for line in lines[2:-1]]
    assert "succeeded" in statuses and "failed" in statuses  # the failed run above is listed too
    succeeded = next(line.split()[0] for line in lines[2:-1] if line.split()[1] == "succeeded")

    shown = invoke(warehouse_position, qa_wh, "runs", "show", succeeded[:24])
    assert shown.exit_code == 0
    text = shown.stdout.splitlines()
    assert text[0] == f"run        {succeeded}"
    assert text[1] == "status     succeeded"
    assert text[2].startswith("dataset    qa@v1  (content hash ")
    assert sum(1 for line in text if re.match(r"\s+\d+\s+train\s", line)) == 8

    as_json = json.loads(
        invoke(warehouse_position, qa_wh, "runs", "show", succeeded, "--format", "json").stdout
    )
    assert as_json["run_id"] == succeeded and len(as_json["metrics"]) == 10

    missing = invoke(warehouse_position, qa_wh, "runs", "show", "zzz")
    assert missing.exit_code == 1 and missing.stderr.count("\n") == 1
