"""Full-parameter training (``--finetune full``) and FSDP (``--fsdp``).

Full fine-tuning runs here on CPU, one process and two DDP ranks. accelerate shards with FSDP only
on GPUs (on CPU ranks it would silently train with DDP), so ``--fsdp`` is refused in one line on
this machine; what it hands TrainingArguments and accelerate's FSDP plugin is checked here, and
scripts/gpu_check.sh trains an FSDP run on CUDA.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from tracebank.train.config import Environment, Resolved, TrainConfig
from tracebank.train.errors import TrainConfigError
from tracebank.train.recipe import parallel_arguments, training_arguments
from tracebank.train.spec import ChildSpec
from tracebank.train.supervisor import child_command
from tracebank.warehouse import catalog

from tests.train.cli import train_cli
from tracebank.cli.main import cli

RECIPE = [
    "--dataset", "qa@v1", "--lr", "1e-3", "--grad-accum", "1", "--warmup-steps", "0", "--seed", "0",
    "--eval-strategy", "no", "--finetune", "full", "--max-steps", "2",
]  # fmt: skip
GPU = Environment(cuda=True, bf16_supported=True, bitsandbytes=True, unsloth=True)


def cfg(**kw) -> TrainConfig:
    return TrainConfig(**{"dataset": "d", "base_model": "m", "output": "o", **kw})


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"fsdp": True, "nproc_per_node": 2}, "--fsdp shards full-parameter training"),
        (
            {"fsdp": True, "finetune": "full", "nnodes": 2, "rdzv_endpoint": "h:1"},
            "--fsdp trains on one node",
        ),
        ({"finetune": "full", "backend": "unsloth"}, "--finetune full trains with TRL"),
        ({"finetune": "full", "save": "lora"}, "--finetune full has no adapter to save"),
        ({"finetune": "full", "load_in_4bit": True}, "4-bit weights cannot be trained in full"),
        ({"finetune": "full", "method": "dpo"}, "DPO trains a LoRA adapter"),
        ({"finetune": "half"}, "unknown --finetune 'half'"),
    ],
)
def test_refused_combinations(overrides, message):
    with pytest.raises(TrainConfigError, match=message):
        cfg(**overrides).validate()


def test_full_runs_resolve_to_trl_in_16_bits_and_fsdp_wants_cuda():
    full = cfg(finetune="full").validate()
    assert (full.resolve(GPU).backend, full.resolve(GPU).load_in_4bit) == ("trl", False)
    assert cfg().resolve(GPU).backend == "unsloth"
    with pytest.raises(TrainConfigError, match="--fsdp needs CUDA GPUs"):
        cfg(finetune="full", fsdp=True, nproc_per_node=2).validate().resolve(Environment())


def test_fsdp_arguments_reach_training_arguments_and_the_fsdp_plugin(tmp_path, monkeypatch):
    from accelerate.utils.constants import FSDP_AUTO_WRAP_POLICY
    from trl import SFTConfig

    monkeypatch.setenv("WORLD_SIZE", "2")  # as torchrun sets it for each rank
    config = cfg(finetune="full", fsdp=True, nproc_per_node=2, gradient_checkpointing=True).validate()
    resolved = config.resolve(GPU)
    resolved = Resolved(**{**vars(resolved), "bf16": False})  # this CPU box cannot build bf16 arguments
    spec = ChildSpec(
        config=config, base_model="m", splits={}, keep_rows={}, max_length=8, truncate=False,
        max_token_id=0, staging_dir=str(tmp_path / "out"), scratch_dir=str(tmp_path),
        events=str(tmp_path / "events"), content_hash=None, logging_dir=str(tmp_path / "logs"),
    )  # fmt: skip
    args = SFTConfig(**training_arguments(config, resolved, spec, "no"))
    assert args.fsdp and not args.gradient_checkpointing and not args.use_cpu
    plugin = args.fsdp_plugin_args
    assert plugin["fsdp_version"] == 2 and plugin["auto_wrap_policy"] == FSDP_AUTO_WRAP_POLICY[0]
    assert plugin["state_dict_type"] == "FULL_STATE_DICT" and plugin["activation_checkpointing"] is True
    lora = cfg(nproc_per_node=2).validate()
    ddp = parallel_arguments(lora, lora.resolve(Environment()), world_size=2)
    assert "fsdp" not in ddp and ddp["use_cpu"] and ddp["ddp_find_unused_parameters"] is False
    # FSDP needs a process group: even one GPU's run starts under torchrun.
    assert "tracebank.train.launch" in child_command(cfg(finetune="full", fsdp=True), tmp_path / "s.json")
    assert "tracebank.train.launch" not in child_command(cfg(finetune="full"), tmp_path / "s.json")


def _train(wh, tiny_model, out, *more):
    return train_cli(wh.root, "--base-model", str(tiny_model), "--output", str(out), *RECIPE, *more)


def _weights(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def _losses(wh, run_id):
    folder, _ = catalog.resolve_run(wh, run_id)
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    return [m for m in map(json.loads, lines) if m.get("split") == "train"]


def test_full_finetuning_trains_every_weight_alone_and_on_two_ranks(qa_wh, tiny_model, tmp_path):
    one = _train(qa_wh, tiny_model, tmp_path / "one", "--batch-size", "4")
    assert one.returncode == 0, one.stderr
    run_id = one.stdout.split()[1]
    _, record = catalog.resolve_run(qa_wh, run_id)
    assert record.model["trainable_params"] == record.model["total_params"]
    base, trained = _weights(tiny_model), _weights(tmp_path / "one")
    assert base.keys() == trained.keys()
    assert all(float((base[k] - trained[k]).abs().max()) > 0 for k in base if "norm" not in k)
    # Two DDP ranks of batch 2 train what one process of batch 4 trains.
    two = _train(qa_wh, tiny_model, tmp_path / "two", "--batch-size", "2", "--nproc-per-node", "2")
    assert two.returncode == 0, two.stderr
    got, want = _losses(qa_wh, two.stdout.split()[1]), _losses(qa_wh, run_id)
    assert got[0]["grad_norm"] == pytest.approx(want[0]["grad_norm"], abs=1e-4)
    assert [m["loss"] for m in got] == pytest.approx([m["loss"] for m in want], abs=1e-4)
    ranks = _weights(tmp_path / "two")
    assert max(float((ranks[k] - trained[k]).abs().max()) for k in trained) <= 1e-4


def test_fsdp_is_refused_in_one_line_on_cpu(qa_wh, tiny_model, tmp_path):
    no_full = CliRunner().invoke(
        cli, ["-w", str(qa_wh.root), "train", "--dataset", "qa", "--base-model", str(tiny_model),
              "--output", str(tmp_path / "x"), "--fsdp", "--nproc-per-node", "2"],
    )  # fmt: skip
    assert no_full.exit_code == 2 and no_full.output.count("\n") == 1
    assert no_full.output.startswith("Error: --fsdp shards full-parameter training")
    on_cpu = _train(qa_wh, tiny_model, tmp_path / "y", "--fsdp", "--nproc-per-node", "2")
    assert on_cpu.returncode != 0 and on_cpu.stdout == ""
    assert on_cpu.stderr.strip().splitlines()[-1].startswith("Error: --fsdp needs CUDA GPUs")
    assert not (tmp_path / "y").exists()
