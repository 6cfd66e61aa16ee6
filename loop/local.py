"""Local infrastructure for the demo: an ``agl store`` child process, and library chatter sent to a log.

Both clean up on any exit, Ctrl-C included.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from loop.errors import LoopError
from serve.process import free_port


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/v1/agl/health", timeout=1) as resp:
            return bool(resp.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


@contextmanager
def agl_store(
    log_path: Path, host: str = "127.0.0.1", port: int | None = None, timeout: float = 60.0
) -> Iterator[str]:
    """Run ``agl store --host HOST --port PORT`` (in memory) and yield its URL; stop it on exit."""
    port = port or free_port(host)
    agl = Path(sys.executable).with_name("agl")
    cmd = [
        str(agl) if agl.exists() else "agl",
        "store",
        "--host",
        host,
        "--port",
        str(port),
        "--log-level",
        "WARNING",
    ]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    with open(log_path, "wb") as log:
        try:
            proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            raise LoopError(f"cannot run `agl store`: {exc}", "is agentlightning installed?") from exc
    url = f"http://{host}:{port}"
    try:
        deadline = time.monotonic() + timeout
        while not _healthy(url):
            if proc.poll() is not None:
                raise LoopError(
                    f"`agl store` exited with {proc.returncode} before it was healthy", f"see {log_path}"
                )
            if time.monotonic() > deadline:
                raise LoopError(f"`agl store` not healthy at {url} after {timeout:.0f}s", f"see {log_path}")
            time.sleep(0.2)
        yield url
    finally:
        _stop(proc)


@contextmanager
def output_to_log(log_path: Path) -> Iterator[TextIO]:
    """Send this process's stdout/stderr (and every child's started meanwhile) to ``log_path``.

    LiteLLM's banner, uvicorn's access lines and the runners' logging go to the
    log; the yielded stream writes to the terminal's original stderr, for the
    caller's own progress lines. Both are restored on exit.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    terminal = os.fdopen(os.dup(2), "w", buffering=1, encoding="utf-8", errors="replace")
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        yield terminal
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved_out, 1)
        os.dup2(saved_err, 2)
        for fd in (saved_out, saved_err, log_fd):
            os.close(fd)
        terminal.close()
