"""Runs in the Agent Lightning 1.0 env (Python 3.12), started by bench/agl1_bench.py.

Usage: python agl1_hook_timing.py HOOK_FILE SPOOL_DIR ROLLOUTS CALLS PROMPT RESPONSE;
prints one JSON line of timings per way of writing.
"""

import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

from agentlightning.schemas import Event, Rollout

spec = importlib.util.spec_from_file_location("_agl_hooks", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
n, calls, prompt, response = (int(x) for x in sys.argv[3:7])


def rollout(i):
    return Rollout.model_validate(
        {
            "rollout_id": f"r{i:05d}",
            "input": {"q": "x" * 200},
            "config": {},
            "status": {"state": "succeeded", "last_attempt_id": "0", "created_at": 1.0, "updated_at": 2.0},
        }
    )


def events(i):
    out = []
    for t in range(calls):
        ids = list(range(prompt + t * (prompt // 4)))
        body = {
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "y" * 800},
                    "token_ids": list(range(response)),
                    "logprobs": {
                        "content": [{"token": "y", "logprob": -0.5, "bytes": [121], "top_logprobs": []}]
                        * response
                    },
                    "finish_reason": "stop",
                }
            ],
            "prompt_token_ids": ids,
        }
        out.append(
            Event(
                event_type="model_request",
                rollout_id=f"r{i:05d}",
                attempt_id="0",
                timestamp=float(t),
                data={
                    "model": "m",
                    "model_version": 1,
                    "request": {"messages": [{"role": "user", "content": "z" * 2000}]},
                    "response": body,
                    "http_status": 200,
                    "status": "ok",
                    "retry_count": 0,
                    "latency_ms": 10.0,
                },
            )
        )
    out.append(
        Event(event_type="reward", rollout_id=f"r{i:05d}", attempt_id="0", timestamp=9.0, data={"value": 1.0})
    )
    return {"0": out}


inputs = [(rollout(i), events(i)) for i in range(n)]
result = {}
for name in ("shipped", "inline_fsync"):
    hook = mod.TracebankSpoolHooks(spool=Path(sys.argv[2]) / name)
    hook.on_startup()
    if name == "inline_fsync":
        hook._spool = lambda entry, h=hook: mod.write_entry(h.spool, entry, durable=True)
    times = []
    for r, ev in inputs:
        t0 = time.perf_counter()
        hook.on_succeeded(r, ev, None)
        times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    hook.sync.drain()
    drain = time.perf_counter() - t0
    size = sum(p.stat().st_size for p in (Path(sys.argv[2]) / name).iterdir()) / n
    times.sort()
    result[name] = {
        "median_ms": statistics.median(times) * 1e3,
        "p99_ms": times[int(0.99 * (n - 1))] * 1e3,
        "total_s": sum(times),
        "drain_s": drain,
        "entry_kib": size / 1024,
    }
print(json.dumps(result))
