"""Start the model server of a round: ``vllm serve`` with the recipe's flags, or tracebank's CPU server.

The process handling comes from ``serve.process`` (ServerProcess, health probe);
the launch itself is done here so that a wait interrupted by Ctrl-C or an
error still stops the server it started: the server runs in a session of its
own (so Ctrl-C does not reach it) and would otherwise outlive the round.
"""

from __future__ import annotations

import re
import shutil
import sys
import threading
from pathlib import Path

from tracebank.loop.config import ServerConfig
from tracebank.loop.errors import LoopUsageError
from tracebank.serve.config import CpuServerConfig
from tracebank.serve.process import ServerProcess, cpu_server_command, free_port, start_server

#: The checkout root: the CPU server child imports ``serve`` from it even when tracebank is not installed.


def served_name(model: Path, config: ServerConfig) -> str:
    """The model name the server answers to (vLLM's default is the path it was given)."""
    return config.served_model_name or str(model)


def vllm_executable() -> str:
    """The ``vllm`` command next to this Python, else on PATH; a usage error when there is none."""
    beside = Path(sys.executable).with_name("vllm")
    if beside.exists():
        return str(beside)
    found = shutil.which("vllm")
    if found is None:
        raise LoopUsageError(
            "vllm is not installed, so `--server vllm` cannot serve the model",
            "pip install 'tracebank[gpu]' on a CUDA machine, or pass --server cpu for a small model",
        )
    return found


def vllm_command(model: Path, port: int, config: ServerConfig) -> list[str]:
    """``vllm serve`` as the recipe runs it, plus the round's memory, length and quantisation flags."""
    cmd = [
        vllm_executable(),
        "serve",
        str(model),
        "--host",
        config.host,
        "--port",
        str(port),
        "--served-model-name",
        served_name(model, config),
    ]
    if config.tool_call_parser:
        cmd += ["--enable-auto-tool-choice", "--tool-call-parser", config.tool_call_parser]
    if config.gpu_memory_utilization is not None:
        cmd += ["--gpu-memory-utilization", str(config.gpu_memory_utilization)]
    if config.max_model_len is not None:
        cmd += ["--max-model-len", str(config.max_model_len)]
    if config.quantization:
        cmd += ["--quantization", config.quantization]
    return cmd + list(config.extra_args)


def server_command(model: Path, port: int, config: ServerConfig) -> list[str]:
    """The command line that serves ``model`` on ``port``."""
    if config.kind == "cpu":
        cpu = CpuServerConfig(
            model=model,
            host=config.host,
            port=port,
            served_model_name=served_name(model, config),
            max_model_len=config.max_model_len,
            default_max_tokens=config.default_max_tokens,
            threads=config.threads,
        )
        cmd = cpu_server_command(cpu)
        return cmd + list(config.extra_args)
    return vllm_command(model, port, config)


def check_model_dir(model: Path) -> Path:
    """``model`` resolved, or a usage error when it is not a model folder."""
    model = Path(model).expanduser().resolve()
    if not model.is_dir():
        raise LoopUsageError(f"model folder {model} does not exist", "pass --base-model a local model folder")
    if not (model / "config.json").exists():
        raise LoopUsageError(
            f"{model} has no config.json, so it is not a model folder",
            "pass --base-model the folder a model was saved to (save_pretrained)",
        )
    return model


def launch(
    model: Path, config: ServerConfig, log_path: Path | None = None, cancel: threading.Event | None = None
) -> ServerProcess:
    """Start the server for ``model`` and return it once ``/health`` answers.

    Raises ServerStartError (with the last log line) when it exits, stays
    unhealthy or ``cancel`` is set meanwhile; on any error or interrupt the
    process group is stopped first (serve.start_server does that).
    """
    model = check_model_dir(model)
    port = config.port or free_port(config.host)
    root = f"http://{config.host}:{port}"
    return start_server(
        server_command(model, port, config),
        f"{root}/v1",
        f"{root}/health",
        log_path,
        config.startup_timeout_s,
        cancel=cancel,
        label=f"{config.kind} server",
    )


def next_model_path(model: str | Path) -> Path:
    """``…/version_3`` -> ``…/version_4`` (the recipe's naming); any other folder gets ``-r1``, ``-r2``…"""
    path = Path(model)
    m = re.fullmatch(r"(.*?)([_-]r?)(\d+)", path.name)
    if m:
        return path.with_name(f"{m[1]}{m[2]}{int(m[3]) + 1}")
    return path.with_name(f"{path.name}-r1")
