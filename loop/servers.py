"""Start the model server of a round: ``vllm serve`` with the recipe's flags, or tracebank's CPU server.

The process handling comes from ``serve.process`` (ServerProcess, health probe);
the launch itself is done here so that a wait interrupted by Ctrl-C or an
error still stops the server it started: the server runs in a session of its
own (so Ctrl-C does not reach it) and would otherwise outlive the round.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

from tracebank.core.events import OnEvent
from tracebank.loop.config import ServerConfig
from tracebank.loop.errors import LoopUsageError
from tracebank.serve.adapters import adapter_base
from tracebank.serve.config import CpuServerConfig
from tracebank.serve.process import ServerProcess, cpu_server_command, free_port, start_server
from tracebank.serve.vllm_server import VllmLaunch, check_cpu_servable, vllm_command, vllm_environment


def served_name(model: Path, config: ServerConfig) -> str:
    """The model name the server answers to (vLLM's default is the path it was given)."""
    return config.served_model_name or str(model)


def vllm_python(config: ServerConfig, on_event: OnEvent | None = None) -> Path:
    """The Python vLLM runs in: ``--vllm-python``, ``$TRACEBANK_VLLM_PYTHON``, or the cached
    environment (serve.vllm_env), built on first use (minutes, once per machine)."""
    if config.vllm_python is not None:
        python = Path(config.vllm_python).expanduser()
        if not python.exists():
            raise LoopUsageError(
                f"--vllm-python {python} does not exist", "pass the python of an environment with vLLM"
            )
        return python
    from tracebank.serve.vllm_env import ensure_vllm_env

    return ensure_vllm_env(on_event=on_event)


def check_vllm(model: Path, config: ServerConfig) -> Path:
    """Before a round starts anything: the model is one vLLM can serve here, and vLLM is there
    (the cached environment is built now when missing). Returns vLLM's Python."""
    from tracebank.serve.vllm_env import has_cuda

    if not has_cuda():
        check_cpu_servable(adapter_base(model) or model)
    return vllm_python(config)


def vllm_launch(model: Path, port: int, config: ServerConfig) -> VllmLaunch:
    """How vLLM serves ``model``: an adapter folder is served as a LoRA module on its base."""
    from tracebank.serve.vllm_env import has_cuda

    cpu = not has_cuda()
    base = adapter_base(model)
    name = served_name(model, config)
    if cpu:
        check_cpu_servable(base or model)
    return VllmLaunch(
        python=vllm_python(config),
        model=base or model,
        port=port,
        host=config.host,
        # Requests name the adapter; the base answers to its own path, as vLLM's default.
        served_model_name=str(base) if base else name,
        cpu=cpu,
        tool_call_parser=config.tool_call_parser,
        gpu_memory_utilization=config.gpu_memory_utilization,
        max_model_len=config.max_model_len,
        quantization=config.quantization,
        enforce_eager=cpu if config.enforce_eager is None else config.enforce_eager,
        lora_modules=((name, model),) if base else (),
        max_lora_rank=config.max_lora_rank,
        extra_args=tuple(config.extra_args),
    )


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
            # As vLLM: responses to requests with tools are parsed for tool calls.
            tool_call_parser=config.tool_call_parser,
        )
        cmd = cpu_server_command(cpu)
        return cmd + list(config.extra_args)
    return vllm_command(vllm_launch(model, port, config))


def check_model_dir(model: Path) -> Path:
    """``model`` resolved, or a usage error when it is not a model folder."""
    model = Path(model).expanduser().resolve()
    if model.is_dir() and adapter_base(model) is not None:
        return model  # a LoRA adapter folder, served on its base
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
    if config.kind == "vllm":
        launch = vllm_launch(model, port, config)
        command, env = vllm_command(launch), vllm_environment(launch.cpu)
    else:
        command, env = server_command(model, port, config), {}
    return start_server(
        command,
        f"{root}/v1",
        f"{root}/health",
        log_path,
        config.startup_timeout_s,
        env=env,
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
