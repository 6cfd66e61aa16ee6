"""TrainConfig: anchor defaults, up-front validation, per-machine resolution."""

from __future__ import annotations

import pytest
from tracebank.train.config import QWEN_TARGETS, Environment, TrainConfig
from tracebank.train.errors import TrainConfigError


def cfg(**kw) -> TrainConfig:
    return TrainConfig(**{"dataset": "d", "base_model": "m", "output": "o", **kw})


def test_defaults_are_the_anchor_recipe():
    c = cfg()
    assert (c.lora_r, c.lora_alpha, c.lora_dropout, c.target_modules) == (32, 32, 0.0, QWEN_TARGETS)
    assert (c.learning_rate, c.batch_size, c.grad_accum, c.warmup_steps) == (2e-4, 2, 4, 5)
    assert (c.lr_scheduler, c.seed, c.save, c.backend) == ("linear", 3407, "merged_16bit", "auto")
    assert len(QWEN_TARGETS) == 7
    c.validate()


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"learning_rate": -1.0}, "learning rate must be positive"),
        ({"learning_rate": 0.0}, "learning rate must be positive"),
        ({"lora_r": 0}, "LoRA rank must be at least 1"),
        ({"lora_dropout": 1.0}, "LoRA dropout must be in [0, 1)"),
        ({"batch_size": 0}, "batch size must be at least 1"),
        ({"backend": "jax"}, "unknown backend 'jax'"),
        ({"save": "gguf"}, "unknown save method 'gguf'"),
        ({"max_steps": 0}, "max steps must be at least 1"),
        ({"epochs": 0}, "epochs must be positive"),
        ({"truncate": True}, "--truncate needs --max-length"),
        ({"eval_strategy": "steps"}, "eval strategy 'steps' needs --eval-steps"),
        ({"eval_strategy": "no", "early_stopping_patience": 2}, "early stopping needs evaluation"),
        ({"timeout": 0}, "timeout must be positive"),
        ({"target_modules": ()}, "no LoRA target modules"),
        ({"lr_scheduler": "warp"}, "unknown lr scheduler 'warp'"),
    ],
)
def test_validate_rejects(overrides, message):
    with pytest.raises(TrainConfigError) as exc:
        cfg(**overrides).validate()
    assert message in exc.value.one_line() and exc.value.exit_code == 2


CPU = Environment()
GPU = Environment(cuda=True, bf16_supported=True, bitsandbytes=True, unsloth=True)
GPU_PLAIN = Environment(cuda=True, bf16_supported=True)


def test_resolve_on_cpu_is_trl_fp32_adamw_torch():
    r = cfg().resolve(CPU)
    assert (r.backend, r.device, r.load_in_4bit, r.optim, r.bf16, r.gradient_checkpointing, r.save_dtype) == (
        "trl",
        "cpu",
        False,
        "adamw_torch",
        False,
        False,
        "float32",
    )


def test_resolve_on_a_full_gpu_box_is_the_anchor():
    r = cfg().resolve(GPU)
    assert (r.backend, r.load_in_4bit, r.optim, r.bf16, r.save_dtype) == (
        "unsloth",
        True,
        "adamw_8bit",
        True,
        "bfloat16",
    )


def test_resolve_on_a_gpu_without_unsloth_or_bitsandbytes():
    r = cfg().resolve(GPU_PLAIN)
    assert (r.backend, r.load_in_4bit, r.optim, r.bf16, r.gradient_checkpointing) == (
        "trl",
        False,
        "adamw_torch",
        True,
        True,
    )
    assert cfg(backend="trl").resolve(GPU).backend == "trl"


@pytest.mark.parametrize(
    "overrides, env, message",
    [
        ({"backend": "unsloth"}, CPU, "the unsloth backend needs a CUDA GPU"),
        ({"backend": "unsloth"}, GPU_PLAIN, "unsloth is not installed"),
        ({"load_in_4bit": True}, CPU, "4-bit loading needs a CUDA GPU"),
        ({"load_in_4bit": True}, GPU_PLAIN, "4-bit loading needs bitsandbytes"),
        ({"optim": "adamw_8bit"}, CPU, "optimizer adamw_8bit needs CUDA and bitsandbytes"),
    ],
)
def test_resolve_rejects_what_the_machine_cannot_do(overrides, env, message):
    with pytest.raises(TrainConfigError, match=message):
        cfg(**overrides).resolve(env)


def test_round_trip_through_a_dict():
    c = cfg(target_modules=("q_proj",), extra={"max_grad_norm": 0.5})
    assert TrainConfig.from_dict(c.to_dict()) == c
    with pytest.raises(TrainConfigError, match="unknown training option"):
        TrainConfig.from_dict({**c.to_dict(), "lora_rank": 3})
