"""Local infrastructure for the demo: an ``agl store`` child process, and library chatter sent to a log.

Both clean up on any exit, Ctrl-C included.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout
from pathlib import Path
from typing import TextIO

from tracebank.loop.errors import LoopError
from tracebank.serve.errors import ServerStartError
from tracebank.serve.process import free_port, start_server


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
    url = f"http://{host}:{port}"
    try:
        server = start_server(
            cmd,
            url,
            f"{url}/v1/agl/health",
            log_path,
            timeout,
            env={"LITELLM_LOCAL_MODEL_COST_MAP": "True"},
            label="`agl store`",
        )
    except ServerStartError as exc:
        raise LoopError(exc.message, exc.hint or "is agentlightning installed?") from exc
    with server:
        yield url


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


@contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send everything written to stdout meanwhile (this process's and its children's) to stderr.

    Keeps stdout for a command's own result: LiteLLM prints its banner on stdout when the
    proxy starts, and a forked proxy or a child server inherits fd 1.
    """
    sys.stdout.flush()
    saved_out = os.dup(1)
    try:
        os.dup2(2, 1)
        with redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved_out, 1)
        os.close(saved_out)
