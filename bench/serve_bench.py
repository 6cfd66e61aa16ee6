"""Serving on this machine: the real vLLM CPU build beside tracebank's CPU stand-in, for information.

Both serve the same tiny Qwen3 (head_dim 64, float32) with a round's flags. Measured:
start-up (process start until ``/health`` answers), then generated tokens per second for
one request at a time and for four at once (greedy, ``ignore_eos``, 64 tokens each).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

TOKENS = 64
REPEATS = 6
CONCURRENT = 4


def _ask(base_url: str, name: str) -> int:
    import httpx

    body = {
        "model": name,
        "messages": [{"role": "user", "content": "Count to ten."}],
        "max_tokens": TOKENS,
        "temperature": 0,
        "ignore_eos": True,
    }
    resp = httpx.post(f"{base_url}/chat/completions", json=body, timeout=600)
    resp.raise_for_status()
    return int(resp.json()["usage"]["completion_tokens"])


def _measure(start: Any, name: str) -> dict[str, float]:
    began = time.monotonic()
    with start() as server:
        startup = time.monotonic() - began
        _ask(server.base_url, name)  # warm-up
        single = []
        for _ in range(REPEATS):
            t = time.monotonic()
            single.append(_ask(server.base_url, name) / (time.monotonic() - t))
        t = time.monotonic()
        with ThreadPoolExecutor(CONCURRENT) as pool:
            tokens = sum(pool.map(lambda _: _ask(server.base_url, name), range(CONCURRENT)))
        together = tokens / (time.monotonic() - t)
    return {"startup": startup, "single": statistics.median(single), "together": together}


def run() -> str:
    from tracebank.serve.process import free_port, start_cpu_server, start_server
    from tracebank.serve.vllm_env import ensure_vllm_env
    from tracebank.serve.vllm_server import VllmLaunch, vllm_command, vllm_environment
    from tracebank.train.tiny_model import build_tiny_qwen3_model

    rows = []
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="serve-bench-") as tmp:
        model = build_tiny_qwen3_model(Path(tmp) / "model")
        log = Path(tmp) / "server.log"

        def cpu() -> Any:
            # One torch thread, as vLLM's CPU build also uses for serving: with two on a busy
            # two-core machine, OpenMP contention makes each token about ten times slower.
            return start_cpu_server(
                model, served_model_name="tiny", log_path=log, tool_call_parser="hermes", threads=1
            )

        def vllm() -> Any:
            port = free_port()
            launch = VllmLaunch(
                python=ensure_vllm_env(), model=model, port=port, served_model_name="tiny", enforce_eager=True
            )
            root = f"http://127.0.0.1:{port}"
            return start_server(
                vllm_command(launch), f"{root}/v1", f"{root}/health", log, 900, vllm_environment(True)
            )

        for label, start in (("CPU stand-in (serve/cpu_server.py)", cpu), ("vLLM 0.32.0 CPU build", vllm)):
            m = _measure(start, "tiny")
            rows.append(f"| {label} | {m['startup']:.0f} | {m['single']:.0f} | {m['together']:.0f} |")
    return "\n".join(
        [
            "## serve: vLLM CPU build beside the CPU stand-in (for information)",
            "",
            "Tiny Qwen3 (2 layers, hidden 128, head_dim 64, float32), greedy, `ignore_eos`, "
            f"{TOKENS} tokens per request; the stand-in with `--threads 1`, vLLM with `--enforce-eager` "
            "(what tracebank passes on CPU for small models), 1 GiB KV cache and its own single "
            "serving thread. Start-up counts from process start to `/health`. "
            "The machine's other work shows in these numbers (1-minute load average "
            f"{load:.1f} on {os.cpu_count()} cores when this section started); they are not a limit "
            "of either server.",
            "",
            f"| server | start-up s | tokens/s, 1 request | tokens/s, {CONCURRENT} at once |",
            "| --- | ---: | ---: | ---: |",
            *rows,
        ]
    )
