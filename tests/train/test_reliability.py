"""Runs always end, and nothing outside tracebank's own output is ever deleted (issue 12, points 2-4)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from tracebank.core.errors import UsageError
from tracebank.train import TrainConfig, TrainError, train
from tracebank.train.model_card import LEGACY_MARKER, PROVENANCE_FILE
from tracebank.warehouse.claims import output_claim
from tracebank.warehouse.storage import Storage

from tests.train import test_failures
from tests.train.conftest import FAST
from tracebank.cli.main import cli

wh = test_failures.wh  # the same one-dataset warehouse


def _config(output, model, **overrides):
    options = {"dataset": "qa", "base_model": str(model), "output": str(output), **FAST, **overrides}
    return TrainConfig(**options)


def _snapshot(folder):
    return sorted((str(p.relative_to(folder)), p.read_bytes()) for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize("where", ["the warehouse", "above it", "inside it"])
def test_train_output_the_warehouse_or_above_it_with_overwrite_deletes_nothing(
    wh, tmp_path, tiny_model, where
):
    output = {"the warehouse": wh.root, "above it": tmp_path, "inside it": wh.root / "datasets"}[where]
    before = _snapshot(tmp_path / "wh")
    with pytest.raises(UsageError, match="the warehouse") as err:
        train(wh, _config(output, tiny_model, overwrite=True))
    assert "\n" not in err.value.one_line() and err.value.exit_code == 2
    assert _snapshot(tmp_path / "wh") == before
    assert Storage(wh).runs() == []


def test_overwrite_refuses_a_folder_tracebank_did_not_write(wh, tmp_path, tiny_model):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    out = CliRunner().invoke(
        cli,
        ["--warehouse", str(wh.root), "train", "--dataset", "qa", "--base-model", str(tiny_model)]
        + ["--output", str(mine), "--overwrite"],
    )
    assert out.exit_code == 2
    assert out.stderr == (
        f"Error: {mine} exists and was not written by tracebank train (choose another path, or move "
        "it away yourself; --overwrite replaces only what tracebank train wrote)\n"
    )
    assert (mine / "thesis.tex").read_text() == "years of work"


def test_overwrite_replaces_a_model_folder_train_wrote(wh, tmp_path, tiny_model):
    output = tmp_path / "model"
    first = train(wh, _config(output, tiny_model, max_steps=1))
    assert json.loads((output / PROVENANCE_FILE).read_text())["run_id"] == first.run_id
    second = train(wh, _config(output, tiny_model, max_steps=1, overwrite=True))
    assert json.loads((output / PROVENANCE_FILE).read_text())["run_id"] == second.run_id
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".model")] == []
    assert not (output / LEGACY_MARKER).exists(), "tracebank.json is the one provenance file"


def test_overwrite_replaces_an_older_model_folder_marked_the_old_way(wh, tmp_path, tiny_model):
    output = tmp_path / "older"
    output.mkdir()
    (output / "older-weights.bin").write_bytes(b"older weights")
    marker = {"run_id": "20260101-000000-qa-0000", "dataset": "qa@v1", "written_at": "2026-01-01"}
    (output / LEGACY_MARKER).write_text(json.dumps(marker))
    run = train(wh, _config(output, tiny_model, max_steps=1, overwrite=True))
    assert json.loads((output / PROVENANCE_FILE).read_text())["run_id"] == run.run_id
    assert (
        not (output / LEGACY_MARKER).exists()
        and (output / "model.safetensors").read_bytes() != b"older weights"
    )


def test_two_trains_with_the_same_output_cannot_both_win(wh, tmp_path, tiny_model):
    output = tmp_path / "model"
    second: dict[str, BaseException] = {}

    def start_a_second_run(event):
        if event.kind == "train_begin" and not second:
            try:
                train(wh, _config(output, tiny_model, max_steps=1))
            except TrainError as exc:
                second["error"] = exc

    winner = train(wh, _config(output, tiny_model, max_steps=2), on_event=start_a_second_run)
    held = f"output folder {output} is being written by train run "
    assert second["error"].one_line().startswith(held)
    assert json.loads((output / PROVENANCE_FILE).read_text())["run_id"] == winner.run_id
    assert [r.status for _, r in Storage(wh).runs()] == ["succeeded"]  # the loser started no run
    assert output_claim(wh, output).holder() is None  # released: the next run may write it
    assert not (tmp_path / ".model.claim").exists()


def _start_cli_train(wh, tmp_path, tiny_model):
    env = {**os.environ, "TRACEBANK_WAREHOUSE": str(wh.root)}
    args = [sys.executable, "-m", "tracebank.cli.main", "train", "--dataset", "qa"]
    args += ["--base-model", str(tiny_model), "--output", str(tmp_path / "model"), "--max-steps", "100000"]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:  # wait until a step was logged: the child is training
        runs = Storage(wh).runs()
        if runs and (runs[0][0] / "metrics.jsonl").stat().st_size > 0:
            return proc, runs[0][0]
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    proc.kill()
    raise AssertionError("training never started")


def test_train_ended_by_sigterm_is_recorded_failed_and_leaves_nothing_behind(wh, tmp_path, tiny_model):
    proc, folder = _start_cli_train(wh, tmp_path, tiny_model)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143
    assert stderr.endswith("Terminated by SIGTERM; nothing partial was committed.\n")
    record = json.loads((folder / "run.json").read_text())
    assert record["status"] == "failed" and record["error"] == "interrupted by SIGTERM"
    assert list(wh.tmp_dir.iterdir()) == []  # scratch removed
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".model")] == []  # staging, claim
    assert not (tmp_path / "model").exists()


def test_train_ended_by_sigkill_shows_process_gone_and_gc_frees_its_leftovers(wh, tmp_path, tiny_model):
    proc, folder = _start_cli_train(wh, tmp_path, tiny_model)
    proc.kill()
    proc.wait(timeout=30)
    run_id = folder.name
    ((_, shown),) = Storage(wh).runs()
    assert shown.status == "failed" and shown.error.startswith("process gone: pid ")
    listed = CliRunner().invoke(cli, ["--warehouse", str(wh.root), "runs", "list", "--format", "csv"])
    assert f"{run_id},failed," in listed.stdout
    assert json.loads((folder / "run.json").read_text())["status"] == "running"  # reads change nothing
    # The orphaned child notices its parent is gone at its next event and exits; then gc cleans up.
    deadline = time.monotonic() + 60
    while (wh.tmp_dir / f"train-{run_id}").exists() and time.monotonic() < deadline:
        out = CliRunner().invoke(cli, ["--warehouse", str(wh.root), "gc"])
        assert out.exit_code == 0, out.output
        time.sleep(0.5)
    assert (
        f"run {run_id}: failed (process gone)" in out.stdout
        or json.loads((folder / "run.json").read_text())["status"] == "failed"
    )
    assert out.stdout.splitlines()[-1].startswith("gc: freed ")
    assert not (wh.tmp_dir / f"train-{run_id}").exists()
    # Its staging folder, marked as the run's, goes once older than --min-age (a writer may want it).
    staging = tmp_path / f".model.tmp-{run_id}"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".model")] == [staging.name]
    swept = CliRunner().invoke(cli, ["--warehouse", str(wh.root), "gc", "--min-age", "0"])
    assert f"removed {staging} (" in swept.stdout, swept.output
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".model")] == []
    record = json.loads((folder / "run.json").read_text())
    assert record["status"] == "failed" and record["error"].startswith("process gone")


def test_max_length_99999999999999999999_is_one_line(wh, tmp_path, tiny_model):
    out = CliRunner().invoke(
        cli,
        ["--warehouse", str(wh.root), "train", "--dataset", "qa", "--base-model", str(tiny_model)]
        + ["--output", str(tmp_path / "model"), "--max-length", "99999999999999999999"],
    )
    assert out.exit_code == 2
    (line,) = out.stderr.splitlines()
    # Refused when the command line is parsed, before anything is read (issue 18's option bounds).
    assert line.startswith(
        "Error: Invalid value for '--max-length': 99999999999999999999 does not fit in 64 bits"
    )
    assert Storage(wh).runs() == []
