"""Record the real vLLM responses to the parity request set into ``fixtures/vllm_responses.json``.

Run it again when the vLLM pin (serve.vllm_env) or the request set changes::

    .venv/bin/python -m tests.serve.record_vllm [--python VLLM_ENV/bin/python]

It builds the tiny Qwen3 model, starts the vLLM CPU build on it with the flags a
round uses (hermes tool parser), sends every request once and writes the bodies
(streams as their list of events) with the facts needed to reproduce them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
from tracebank.serve.process import free_port, start_server
from tracebank.serve.vllm_env import ensure_vllm_env, vllm_importable
from tracebank.serve.vllm_server import vllm_command, vllm_environment

from tests.serve import vllm_parity as parity


def send_all(root: str) -> dict[str, Any]:
    """Every request of the set, answered by the server at ``root``."""
    responses: dict[str, Any] = {}
    for name in parity.REQUESTS:
        body = parity.request_body(name)
        resp = httpx.post(f"{root}/v1/chat/completions", json=body, timeout=300)
        entry: dict[str, Any] = {"status": resp.status_code}
        if body.get("stream") and resp.status_code == 200:
            entry["events"] = parity.parse_sse(resp.text)
        else:
            entry["body"] = resp.json()
        responses[name] = entry
    return responses


def record(python: Path, out: Path, log_dir: Path) -> dict[str, Any]:
    from tracebank.train.tiny_model import build_tiny_qwen3_model

    model = build_tiny_qwen3_model(log_dir / "model", seed=parity.MODEL_SEED)
    port = free_port()
    cmd = vllm_command(parity.vllm_launch(python, model, port))
    root = f"http://127.0.0.1:{port}"
    with start_server(
        cmd, f"{root}/v1", f"{root}/health", log_dir / "vllm.log", 900, vllm_environment(True), label="vLLM"
    ):
        responses = send_all(root)
    return write_fixture(out, python, model, cmd, responses)


def write_fixture(out: Path, python: Path, model: Path, cmd: list[str], responses: dict[str, Any]) -> Any:
    weights = (model / "model.safetensors").read_bytes()
    fixture = {
        "vllm": vllm_importable(python),
        "model": {"builder": "build_tiny_qwen3_model", "seed": parity.MODEL_SEED},
        "model_sha256": hashlib.sha256(weights).hexdigest(),
        "server_args": cmd[4:],
        "requests": {name: parity.request_body(name) for name in parity.REQUESTS},
        "responses": responses,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(fixture, indent=1, ensure_ascii=False) + "\n")
    return fixture


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", type=Path, default=None, help="a Python with vLLM (default: built)")
    parser.add_argument("--out", type=Path, default=parity.FIXTURE)
    args = parser.parse_args(argv)
    python = args.python or ensure_vllm_env()
    with tempfile.TemporaryDirectory(prefix="record-vllm-") as tmp:
        fixture = record(python, args.out, Path(tmp))
    print(f"recorded {len(fixture['responses'])} responses from vLLM {fixture['vllm']} to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
