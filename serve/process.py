"""Model servers as child processes: start one, wait for its health check, stop it.

Used for the CPU server here, and meant for ``vllm serve`` too: both are a
command line plus a ``/health`` route.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO

from tracebank.serve.config import CpuServerConfig
from tracebank.serve.errors import ServerStartError


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def is_healthy(url: str, timeout: float = 1.0) -> bool:
    """Whether ``url`` answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return bool(resp.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def cpu_server_command(config: CpuServerConfig) -> list[str]:
    """The command line that serves ``config.model`` with the CPU server, like ``vllm serve`` would."""
    return [sys.executable, "-P", "-m", "tracebank.serve.cpu_server", *config.to_argv()]


@dataclass
class ServerProcess:
    """A started model server: its process, base URL (``.../v1``) and log file."""

    process: subprocess.Popen[bytes]
    base_url: str
    health_url: str
    log_path: Path | None = None

    def log_tail(self, chars: int = 2000) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the server's process group, then SIGKILL it if it lingers."""
        if self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def start_server(
    command: Sequence[str],
    base_url: str,
    health_url: str,
    log_path: Path | None = None,
    timeout: float = 120.0,
    env: dict[str, str] | None = None,
    cancel: threading.Event | None = None,
    label: str = "model server",
) -> ServerProcess:
    """Start ``command`` in its own process group and wait until ``health_url`` answers 200.

    Raises ServerStartError (with the last log line) if it exits, stays unhealthy or
    ``cancel`` is set meanwhile. On any error or interrupt the process group is
    stopped before the exception leaves, so no server outlives a failed start.
    """
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
    log: IO[bytes] | int = open(log_path, "wb") if log_path else subprocess.DEVNULL  # noqa: SIM115
    try:
        proc = subprocess.Popen(
            list(command),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    except OSError as exc:
        raise ServerStartError(f"cannot run {command[0]}: {exc}") from exc
    finally:
        if not isinstance(log, int):
            log.close()
    server = ServerProcess(proc, base_url, health_url, log_path)
    hint = f"see {log_path}" if log_path else None
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                tail = server.log_tail(800).strip().splitlines()
                raise ServerStartError(
                    f"{label} exited with {proc.returncode} before it was healthy"
                    + (f": {tail[-1]}" if tail else ""),
                    hint,
                )
            if is_healthy(health_url):
                return server
            if cancel is not None and cancel.is_set():
                raise ServerStartError(f"cancelled while the {label} was starting")
            time.sleep(0.2)
        raise ServerStartError(f"{label} not healthy at {health_url} after {timeout:.0f}s", hint)
    except BaseException:
        server.stop()
        raise


def start_cpu_server(
    model: str | Path,
    port: int | None = None,
    host: str = "127.0.0.1",
    served_model_name: str | None = None,
    max_model_len: int | None = None,
    default_max_tokens: int | None = None,
    log_path: Path | None = None,
    timeout: float = 120.0,
    threads: int | None = None,
    tool_call_parser: str | None = None,
) -> ServerProcess:
    """Serve ``model`` with ``python -m tracebank.serve.cpu_server`` on ``port`` (a free one when None)."""
    config = CpuServerConfig(
        model=Path(model),
        host=host,
        port=port or free_port(host),
        served_model_name=served_model_name,
        max_model_len=max_model_len,
        default_max_tokens=default_max_tokens or CpuServerConfig.default_max_tokens,
        threads=threads,
        tool_call_parser=tool_call_parser,
    )
    cmd = cpu_server_command(config)
    root = f"http://{host}:{config.port}"
    return start_server(cmd, f"{root}/v1", f"{root}/health", log_path, timeout)
