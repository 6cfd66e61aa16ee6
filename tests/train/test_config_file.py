"""`train --config FILE.yaml` and `runs show RUN --format yaml`: a file equals its flags, flags given
on the command line win, and the printed file of a run replays it to the same losses."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner
from tracebank.warehouse import catalog

from tests.train.cli import SINGLE_THREAD
from tracebank.cli.main import cli

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
    assert "# not replayed (a record never decides them): report_to" in shown.stdout
    replay_id, replayed = _train(qa_wh, "--config", str(replay), "--output", str(tmp_path / "c"))
    # where metrics go is the replaying user's choice, not the record's
    assert _settings(replayed) == {**_settings(by_flags), "dataset": "qa@v1", "report_to": []}
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


class Payload:
    """What a planter stores as the rendezvous state: unpickling it creates ``marker``."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.fixture
def planted_store(tmp_path):
    """A real c10d TCPStore on loopback whose rendezvous state is a pickled payload, as torchrun's
    c10d rendezvous would read it (base64 of a pickle under ``torch.rendezvous.<id>``)."""
    import base64
    import pickle

    from torch.distributed import TCPStore
    from tracebank.train.supervisor import RDZV_ID

    marker = tmp_path / "payload-ran"
    store = TCPStore(host_name="127.0.0.1", port=0, is_master=True, wait_for_workers=False)
    store.set(f"torch.rendezvous.{RDZV_ID}", base64.b64encode(pickle.dumps(Payload(marker))))
    return store, marker


def plant_run(wh, tiny_model, store_port, **hyperparameters):
    """A run record a co-worker with write access wrote into ``wh``: a failed run whose settings
    name a rendezvous at ``store_port``, two processes, and trainer keys that would publish."""
    from tracebank.train.config import TrainConfig
    from tracebank.warehouse.layout import RUN_RECORD
    from tracebank.warehouse.records import RunRecord

    settings = TrainConfig(
        dataset="qa@v1",
        base_model=str(tiny_model),
        output=str(wh.root.parent / "planted-output"),
        learning_rate=1e-2,
        batch_size=4,
        grad_accum=1,
        warmup_steps=0,
        max_steps=2,
        seed=0,
        save="lora",
        eval_strategy="no",
    ).to_dict()
    settings.update(
        nnodes=2,
        node_rank=0,
        nproc_per_node=2,
        rdzv_endpoint=f"127.0.0.1:{store_port}",
        overwrite=True,
        extra={"push_to_hub": True, "hub_model_id": "planter/model", "adam_beta2": 0.99},
    )
    settings.update(hyperparameters)
    _, _, version = catalog.resolve_dataset(wh, "qa@v1")
    run_id = "20260101-000000-qa-beef"
    record = RunRecord(
        run_id=run_id,
        status="failed",
        dataset="qa@v1",
        content_hash=version.content_hash,
        base_model=str(tiny_model),
        backend="trl",
        output_dir=settings["output"],
        save="lora",
        hyperparameters=settings,
        libraries={},
        started_at="2026-01-01T00:00:00+00:00",
        error="planted",
    )
    folder = wh.run_dir(run_id)
    folder.mkdir(parents=True)
    (folder / RUN_RECORD).write_text(json.dumps(record.to_json()))
    return run_id


def test_a_planted_run_record_replayed_never_reaches_the_address_it_names(
    qa_wh, tiny_model, tmp_path, planted_store, single_thread
):
    """`runs show --format yaml` printed nnodes, node-rank and rdzv-endpoint; `train --config` of it
    joined the planter's TCPStore and unpickled its state. Now the file holds what shapes the model,
    names what it left out in one comment line, and the replay trains on one node."""
    store, marker = planted_store
    run_id = plant_run(qa_wh, tiny_model, store.port)
    keys = store.num_keys()
    shown = CliRunner().invoke(cli, ["-w", str(qa_wh.root), "runs", "show", run_id, "--format", "yaml"])
    assert shown.exit_code == 0, shown.output
    printed = yaml.safe_load(shown.stdout)
    never = {"nnodes", "node-rank", "nproc-per-node", "rdzv-endpoint", "overwrite", "output"}
    assert not never & set(printed)
    assert printed["extra"] == {"adam_beta2": 0.99} and printed["lr"] == 1e-2
    [dropped] = [line for line in shown.stdout.splitlines() if "not replayed" in line]
    assert dropped.startswith("# ") and "nnodes, rdzv_endpoint" in dropped and "extra.hub_model_id" in dropped

    replay = tmp_path / "replay.yaml"
    replay.write_text(shown.stdout)
    out = tmp_path / "replayed"
    new_id, record = _train(qa_wh, "--config", str(replay), "--output", str(out))
    assert (out / "adapter_model.safetensors").exists()
    hp = record.hyperparameters
    assert (hp["nnodes"], hp["nproc_per_node"], hp["rdzv_endpoint"]) == (1, 1, None)
    assert hp["extra"] == {"adam_beta2": 0.99} and hp["output"] == str(out)
    assert not marker.exists() and store.num_keys() == keys  # nobody joined or read the store


def test_a_run_records_its_output_as_an_absolute_path(
    qa_wh, tiny_model, tmp_path, monkeypatch, single_thread
):
    """`--output model` was recorded as given: a replay from another folder wrote elsewhere."""
    monkeypatch.chdir(tmp_path)
    flags = ["--dataset", "qa", "--max-steps", "1", "--save", "lora", "--eval-strategy", "no"]
    _, record = _train(qa_wh, *flags, "--base-model", str(tiny_model), "--output", "model")
    assert record.hyperparameters["output"] == str(tmp_path / "model") == record.output_dir
