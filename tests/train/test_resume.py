"""Resume: a run SIGKILLed after its second checkpoint and resumed ends with the same adapter as an
uninterrupted run (same seed, CPU, one thread), in one run record showing both attempts."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from click.testing import CliRunner
from tracebank.train.checkpoints import complete_checkpoints
from tracebank.train.checkpoints import run_scratch as scratch_dir
from tracebank.warehouse import catalog
from tracebank.warehouse.storage import Storage

from tests.train.cli import SINGLE_THREAD, train_cli
from tests.train.test_config_file import planted_store  # noqa: F401 (fixture)
from tracebank.cli.main import cli

#: 24 steps over 6 epochs of 4 batches, a checkpoint every 2 steps: resuming crosses epochs.
RECIPE = [
    "--lr", "1e-2", "--batch-size", "4", "--grad-accum", "1", "--warmup-steps", "0", "--max-steps", "24",
    "--save-steps", "2", "--seed", "0", "--eval-strategy", "no", "--save", "lora",
]  # fmt: skip


def _train_command(wh, tiny_model, out, *more):
    return [
        sys.executable, "-m", "tracebank.cli.main", "-w", str(wh.root), "train", "--quiet",
        "--dataset", "qa@v1", "--base-model", str(tiny_model), "--output", str(out), *RECIPE, *more,
    ]  # fmt: skip


def _env():
    return {**os.environ, **SINGLE_THREAD}


def _adapter(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "adapter_model.safetensors"))


def _only_run(wh, exclude=()):
    ids = [folder.name for folder, _ in Storage(wh).runs() if folder.name not in exclude]
    assert len(ids) == 1, ids
    return catalog.resolve_run(wh, ids[0])


def _kill_after_checkpoint(proc, wh, step, exclude, timeout=300.0):
    """SIGKILL the train command and its training child once the run has a whole checkpoint at
    ``step`` or later (like a node lost to preemption: nothing gets to clean up)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read()
        runs = [f for f, _ in Storage(wh).runs() if f.name not in exclude]
        if runs:
            _, record = catalog.resolve_run(wh, runs[0].name)
            if (record.attempts[-1].get("last_checkpoint") or 0) >= step:
                family = [proc.pid, *(c.pid for c in psutil.Process(proc.pid).children(recursive=True))]
                for pid in family:
                    os.kill(pid, signal.SIGKILL)
                proc.wait()
                return record.run_id
        time.sleep(0.02)
    raise AssertionError("no checkpoint appeared")


@pytest.fixture(scope="module")
def uninterrupted(qa_wh, tiny_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("resume-ref") / "adapter"
    done = subprocess.run(_train_command(qa_wh, tiny_model, out), env=_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return out, done.stdout.split()[1]


def test_a_killed_run_resumes_to_the_same_adapter(qa_wh, tiny_model, tmp_path, uninterrupted, monkeypatch):
    reference, reference_id = uninterrupted
    out = tmp_path / "adapter"
    proc = subprocess.Popen(
        _train_command(qa_wh, tiny_model, out), env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    run_id = _kill_after_checkpoint(proc, qa_wh, 4, exclude={reference_id})
    assert not out.exists()  # nothing published
    steps = [step for step, _ in complete_checkpoints(scratch_dir(qa_wh, run_id))]
    assert steps and 4 <= steps[-1] < 24 and len(steps) <= 2  # --save-total-limit 2

    for key, value in SINGLE_THREAD.items():
        monkeypatch.setenv(key, value)
    result = CliRunner().invoke(cli, ["-w", str(qa_wh.root), "train", "--quiet", "--resume", run_id])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"run {run_id} succeeded")

    resumed, expected = _adapter(out), _adapter(reference)
    assert resumed.keys() == expected.keys()
    worst = max(float((resumed[k] - expected[k]).abs().max()) for k in expected)
    assert worst <= 1e-6, worst

    _, record = catalog.resolve_run(qa_wh, run_id)
    first, second = record.attempts
    assert record.status == "succeeded" and len(record.attempts) == 2
    assert first["attempt"] == 1 and first["resumed_from_step"] is None
    assert first["status"] == "failed" and "ended without finishing the run" in first["error"]
    assert second["resumed_from_step"] == steps[-1] and second["status"] == "succeeded"
    assert record.summary["steps"] == 24
    assert not scratch_dir(qa_wh, run_id).exists()  # a finished run's checkpoints are gone
    shown = CliRunner().invoke(cli, ["-w", str(qa_wh.root), "runs", "show", run_id]).stdout.splitlines()
    attempts = [line for line in shown if line.startswith("attempt ")]
    assert attempts[0].startswith("attempt 1  failed, ") and "ended without finishing the run" in attempts[0]
    assert attempts[1].startswith(f"attempt 2  succeeded from the step-{steps[-1]} checkpoint, ")

    # the losses after the checkpoint were trained again: the resumed attempt's equal the reference's
    metrics = _metrics(qa_wh, run_id)
    reference_losses = {m["step"]: m["loss"] for m in _metrics(qa_wh, reference_id)}
    again = [m for m in metrics if m["attempt"] == 2]
    assert [m["step"] for m in again] == list(range(steps[-1] + 1, 25))
    assert [m["loss"] for m in again] == pytest.approx([reference_losses[m["step"]] for m in again], abs=1e-5)


def _metrics(wh, run_id):
    folder, _ = catalog.resolve_run(wh, run_id)
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    return [m for m in map(json.loads, lines) if m.get("split") == "train"]


def test_resume_refuses_a_succeeded_run_and_new_settings(qa_wh, uninterrupted):
    _, reference_id = uninterrupted
    runner = CliRunner()
    done = runner.invoke(cli, ["-w", str(qa_wh.root), "train", "--resume", reference_id])
    assert done.exit_code != 0 and f"run {reference_id} already succeeded" in done.output
    changed = runner.invoke(cli, ["-w", str(qa_wh.root), "train", "--resume", reference_id, "--lr", "1"])
    assert changed.exit_code == 2 and "--lr cannot change them" in changed.output
    assert len(changed.output.strip().splitlines()) == 1


def test_a_sigtermed_run_keeps_only_its_checkpoints_until_gc(qa_wh, tiny_model, tmp_path):
    """Preemption (SIGTERM): the run is recorded failed and keeps its whole checkpoints for --resume,
    nothing else of its scratch; `tracebank gc` removes them with the rest of a dead run once they
    are older than its --min-age."""
    before = {folder.name for folder, _ in Storage(qa_wh).runs()}
    proc = subprocess.Popen(
        _train_command(qa_wh, tiny_model, tmp_path / "adapter"),
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 300
    run_id = None
    while run_id is None and time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read()
        for folder, record in Storage(qa_wh).runs():
            if folder.name not in before and (record.attempts[-1].get("last_checkpoint") or 0) >= 2:
                run_id = folder.name
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)
    assert proc.returncode == 143
    _, record = catalog.resolve_run(qa_wh, run_id)
    assert record.status == "failed" and record.error == "interrupted by SIGTERM"
    scratch = scratch_dir(qa_wh, run_id)
    assert [p.name for p in scratch.iterdir()] == ["checkpoints"] and complete_checkpoints(scratch)
    kept = CliRunner().invoke(cli, ["-w", str(qa_wh.root), "gc"])  # young: `train --resume` may want it
    assert kept.exit_code == 0 and complete_checkpoints(scratch), kept.output
    swept = CliRunner().invoke(cli, ["-w", str(qa_wh.root), "gc", "--min-age", "0"])
    assert swept.exit_code == 0, swept.output
    assert not scratch.exists()


DPO = [
    "--dataset", "prefs", "--method", "dpo", "--lr", "2e-2", "--batch-size", "4", "--grad-accum", "1",
    "--warmup-steps", "0", "--max-steps", "9", "--save-steps", "2", "--seed", "0", "--eval-strategy", "no",
    "--save", "lora",
]  # fmt: skip


@pytest.fixture(scope="module")
def pref_wh(tmp_path_factory):
    """Twelve preference pairs (three batches of four an epoch): a resumed DPO run crosses epochs."""
    from tracebank.transform import TransformConfig, transform
    from tracebank.warehouse.location import Warehouse

    from tests.fixtures.preference import commit_03
    from tests.train.test_dpo import toy_rollouts

    wh = Warehouse(tmp_path_factory.mktemp("dpo-resume") / "warehouse").init()
    commit_03(
        wh,
        toy_rollouts()
        + [dataclasses.replace(r, rollout_id=r.rollout_id + "b", task=r.task + "b") for r in toy_rollouts()],
    )
    transform(wh, TransformConfig(name="prefs", kind="preference"))
    return wh


FULL = [
    "--dataset", "qa@v1", "--finetune", "full", "--lr", "1e-3", "--batch-size", "4", "--grad-accum", "1",
    "--warmup-steps", "0", "--max-steps", "9", "--save-steps", "2", "--seed", "0", "--eval-strategy", "no",
]  # fmt: skip


def _weights(folder):
    from safetensors.torch import load_file

    name = "adapter_model" if (folder / "adapter_model.safetensors").exists() else "model"
    return load_file(str(folder / f"{name}.safetensors"))


def _killed_and_resumed_equals_uninterrupted(wh, tiny_model, tmp_path, recipe):
    """Train ``recipe`` (9 steps, a checkpoint every 2) once whole and once SIGKILLed after its step-4
    checkpoint and resumed: the same weights within 1e-6, the same losses after the checkpoint."""

    def command(out):
        return [
            sys.executable, "-m", "tracebank.cli.main", "-w", str(wh.root), "train", "--quiet",
            "--base-model", str(tiny_model), "--output", str(out), *recipe,
        ]  # fmt: skip

    reference = tmp_path / "reference"
    done = subprocess.run(command(reference), env=_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    reference_id = done.stdout.split()[1]
    out = tmp_path / "model"
    proc = subprocess.Popen(command(out), env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    before = {folder.name for folder, _ in Storage(wh).runs()}
    run_id = _kill_after_checkpoint(proc, wh, 4, exclude=before)
    assert not out.exists()
    steps = [step for step, _ in complete_checkpoints(scratch_dir(wh, run_id))]
    assert steps and 4 <= steps[-1] < 9

    result = subprocess.run(
        [*command(out)[:5], "train", "--quiet", "--resume", run_id],
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    resumed, expected = _weights(out), _weights(reference)
    assert resumed.keys() == expected.keys()
    worst = max(float((resumed[k] - expected[k]).abs().max()) for k in expected)
    assert worst <= 1e-6, worst
    _, record = catalog.resolve_run(wh, run_id)
    assert [a["status"] for a in record.attempts] == ["failed", "succeeded"]
    assert record.attempts[1]["resumed_from_step"] == steps[-1] and record.summary["steps"] == 9
    reference_losses = {m["step"]: m["loss"] for m in _metrics(wh, reference_id)}
    again = [m for m in _metrics(wh, run_id) if m["attempt"] == 2]
    assert [m["loss"] for m in again] == pytest.approx([reference_losses[m["step"]] for m in again], abs=1e-5)


def test_a_killed_dpo_run_resumes_to_the_same_adapter(pref_wh, tiny_model, tmp_path):
    _killed_and_resumed_equals_uninterrupted(pref_wh, tiny_model, tmp_path, DPO)


def test_a_killed_full_finetuning_run_resumes_to_the_same_weights(qa_wh, tiny_model, tmp_path):
    _killed_and_resumed_equals_uninterrupted(qa_wh, tiny_model, tmp_path, FULL)


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory, tokenizer, tiny_model):
    """A warehouse of its own holding `qa@v1` and one run SIGKILLed after its step-2 checkpoint."""
    from tracebank.warehouse.location import Warehouse

    from tests.fixtures.datasets import QA_PAIRS, qa_rows, write_dataset

    root = tmp_path_factory.mktemp("planted-resume")
    wh = Warehouse(root / "warehouse").init()
    write_dataset(wh, "qa", qa_rows(tokenizer, QA_PAIRS, repeat=2), validation=qa_rows(tokenizer, QA_PAIRS))
    proc = subprocess.Popen(
        _train_command(wh, tiny_model, root / "adapter"),
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    return wh, _kill_after_checkpoint(proc, wh, 2, exclude=set())


def _planted_copy(killed_run, tmp_path, output_dir, **hyperparameters):
    """A copy of the killed run's warehouse whose run record a co-worker has edited."""
    import shutil

    from tracebank.warehouse.layout import RUN_RECORD
    from tracebank.warehouse.location import Warehouse

    source, run_id = killed_run
    wh = Warehouse(tmp_path / "warehouse")
    shutil.copytree(source.root, wh.root, symlinks=True, ignore=shutil.ignore_patterns("events"))  # a FIFO
    path = wh.run_dir(run_id) / RUN_RECORD
    record = json.loads(path.read_text())
    record["output_dir"] = str(output_dir)
    record["hyperparameters"].update(max_steps=4, **hyperparameters)
    path.write_text(json.dumps(record))
    return wh, run_id


def _resume(wh, run_id, *args):
    return train_cli(wh.root, "--resume", run_id, *args, timeout=300)


def test_a_planted_record_resumes_on_one_node_and_never_reaches_its_rendezvous(
    killed_run,
    tmp_path,
    planted_store,  # noqa: F811
):
    """`train --resume` took nnodes, node-rank and rdzv-endpoint from the record: it joined the
    planter's TCPStore and unpickled its state, and passed `extra` (push_to_hub) to the trainer.
    Now it resumes here as one process, with the allowed settings only, and says what it left out."""
    store, marker = planted_store
    keys = store.num_keys()
    wh, run_id = _planted_copy(
        killed_run,
        tmp_path,
        tmp_path / "model",
        nnodes=2,
        node_rank=0,
        nproc_per_node=2,
        rdzv_endpoint=f"127.0.0.1:{store.port}",
        save_steps=None,  # so the filed code's checks let the multi-node settings through
        extra={"push_to_hub": True, "hub_model_id": "planter/model", "adam_beta2": 0.99},
    )
    done = _resume(wh, run_id)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"run {run_id} succeeded")
    warnings = [line for line in done.stderr.splitlines() if line.startswith("Warning:")]
    assert warnings == [
        f"Warning: run {run_id}: not replayed (a record never decides them): nnodes, nproc_per_node, "
        "rdzv_endpoint, extra.push_to_hub, extra.hub_model_id; resuming on this machine as one process"
    ]
    assert not marker.exists() and store.num_keys() == keys  # nobody joined or read the store
    assert (tmp_path / "model" / "adapter_model.safetensors").exists()
    _, record = catalog.resolve_run(wh, run_id)
    hp = record.hyperparameters
    assert (hp["nnodes"], hp["nproc_per_node"], hp["rdzv_endpoint"]) == (1, 1, None)
    assert hp["extra"] == {"adam_beta2": 0.99} and record.summary["steps"] == 4


def _model_folder(folder, run_id):
    folder.mkdir()
    (folder / "tracebank.json").write_text(json.dumps({"run_id": run_id}))
    (folder / "model.safetensors").write_text("their weights")


def test_resume_never_replaces_another_runs_model(killed_run, tmp_path):
    """With `overwrite` in its record, a resume replaced any folder holding a tracebank.json: another
    run's model. It writes only into an absent output or its own."""
    theirs = tmp_path / "theirs"
    _model_folder(theirs, "20250101-000000-qa-0000")
    wh, run_id = _planted_copy(killed_run, tmp_path, theirs, overwrite=True)
    done = _resume(wh, run_id)
    assert done.returncode == 1 and done.stderr.strip().count("\n") == 0, done.stderr
    assert f"output {theirs} holds what another run (or not tracebank) wrote" in done.stderr
    assert sorted(p.name for p in theirs.iterdir()) == ["model.safetensors", "tracebank.json"]
    assert (theirs / "model.safetensors").read_text() == "their weights"


def test_resume_replaces_a_model_folder_its_own_run_wrote(killed_run, tmp_path):
    _, run_id = killed_run
    own = tmp_path / "own"
    _model_folder(own, run_id)
    wh, _ = _planted_copy(killed_run, tmp_path, own)
    done = _resume(wh, run_id)
    assert done.returncode == 0, done.stderr
    assert (own / "adapter_model.safetensors").exists() and not (own / "model.safetensors").exists()
    assert json.loads((own / "tracebank.json").read_text())["run_id"] == run_id


def test_resume_into_a_new_output_the_user_names(killed_run, tmp_path):
    """Where the recorded output holds another run's model, the user names a new folder: the run
    resumes there and the other model is left as it was."""
    theirs = tmp_path / "theirs"
    _model_folder(theirs, "20250101-000000-qa-0000")
    wh, run_id = _planted_copy(killed_run, tmp_path, theirs, overwrite=True)
    done = _resume(wh, run_id, "--output", str(tmp_path / "fresh"))
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "fresh" / "tracebank.json").read_text())["run_id"] == run_id
    assert (theirs / "model.safetensors").read_text() == "their weights"
    record = json.loads((wh.root / "runs" / run_id / "run.json").read_text())
    assert record["output_dir"] == str(tmp_path / "fresh")


def test_resume_into_a_named_output_holding_files_is_one_line(killed_run, tmp_path):
    wh, run_id = _planted_copy(killed_run, tmp_path, tmp_path / "model")
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    done = _resume(wh, run_id, "--output", str(taken))
    assert done.returncode != 0 and done.stderr.strip().count("\n") == 0, done.stderr
    assert sorted(p.name for p in taken.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("where", ["missing/deep/model", "relative"])
def test_a_resume_refused_for_its_output_creates_nothing(killed_run, tmp_path, monkeypatch, where):
    """A resume created the parent folders of the recorded output, and read a relative one from
    wherever it ran; now a record never makes tracebank create a folder or guess a path."""
    monkeypatch.chdir(tmp_path)
    output = tmp_path / where if where != "relative" else "model"
    wh, run_id = _planted_copy(killed_run, tmp_path, output)
    before = sorted(tmp_path.iterdir())
    done = _resume(wh, run_id)
    assert done.returncode == 1 and done.stderr.strip().count("\n") == 0, done.stderr
    assert done.stderr.startswith("Error: ") and "--output DIR" in done.stderr
    assert sorted(tmp_path.iterdir()) == before


@pytest.mark.parametrize("setting", [{"lora_r": "many"}, {"learning_rate": None}])
def test_a_record_with_settings_of_the_wrong_type_is_one_line(killed_run, tmp_path, setting):
    wh, run_id = _planted_copy(killed_run, tmp_path, tmp_path / "model", **setting)
    done = _resume(wh, run_id)
    assert done.returncode == 1 and done.stderr.strip().count("\n") == 0, done.stderr
    assert done.stderr.startswith("Error: ") and not (tmp_path / "model").exists()


def test_a_checkpoint_reached_through_a_link_is_no_checkpoint(tmp_path):
    """A co-worker who can write the warehouse could link a checkpoint (or its marker) to a folder
    anywhere: a resume would load weights from there. Only plain folders count."""
    from tracebank.train.checkpoints import COMPLETE, checkpoints_dir

    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "checkpoint-9").mkdir(parents=True)
    (elsewhere / "checkpoint-9" / COMPLETE).write_text("")
    (elsewhere / "marker").write_text("")
    scratch = tmp_path / "wh" / "tmp" / "train-r1"
    root = checkpoints_dir(scratch)
    (root / "checkpoint-2").mkdir(parents=True)
    (root / "checkpoint-2" / COMPLETE).write_text("")
    (root / "checkpoint-7").symlink_to(elsewhere / "checkpoint-9", target_is_directory=True)
    (root / "checkpoint-8").mkdir()
    (root / "checkpoint-8" / COMPLETE).symlink_to(elsewhere / "marker")
    (root / "checkpoint-9").mkdir()  # not whole: no marker
    assert complete_checkpoints(scratch) == [(2, root / "checkpoint-2")]
