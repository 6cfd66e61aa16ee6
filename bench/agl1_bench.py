"""The 1.0 trainer hook's cost inside the trainer's loop, next to that loop's 1 s poll.

1.0's rollout loop (``AglRolloutManager``) calls the hook once per finished rollout,
one after another, inside its poll loop; whatever the hook spends is added to every
training step. Measured in the Agent Lightning 1.0 env (Python 3.12) with its own
pydantic ``Rollout`` and ``Event`` objects, as the trainer passes them: ``ROLLOUTS``
rollouts of ``CALLS`` gateway calls each (prompt ``PROMPT`` tokens growing per turn,
``RESPONSE`` response tokens with logprobs, like the gateway records in train mode)
plus a reward. Two ways of writing: the hook as shipped (atomic rename, fsync on a
background thread) and an inline fsync of file and folder before returning.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

ROLLOUTS, CALLS, PROMPT, RESPONSE = 200, 4, 1500, 300

SCRIPT = Path(__file__).with_name("agl1_hook_timing.py")


def run() -> str:
    from tracebank.collect import agl1_hook
    from tracebank.collect.agl1_env import ensure_agl1_env

    env = ensure_agl1_env()
    with tempfile.TemporaryDirectory() as tmp:
        args = [str(agl1_hook.__file__), tmp, str(ROLLOUTS), str(CALLS), str(PROMPT), str(RESPONSE)]
        out = subprocess.run(
            [str(env.python), "-P", str(SCRIPT), *args], capture_output=True, text=True, check=True
        )
    r = json.loads(out.stdout.strip().splitlines()[-1])
    s, f = r["shipped"], r["inline_fsync"]
    lines = [
        "## agl1 hook",
        "",
        f"{ROLLOUTS} finished rollouts of {CALLS} gateway calls ({PROMPT}+ prompt tokens, "
        f"{RESPONSE} response tokens with logprobs) and a reward, {s['entry_kib']:.0f} KiB of spool JSON "
        "each, handed to "
        "`TracebankSpoolHooks.on_succeeded` one after another as 1.0's rollout loop does (pydantic objects, "
        "Agent Lightning 1.0.2 env).",
        "",
        "| write | median ms / rollout | p99 ms | total s for the batch | fsync drain after s |",
        "|---|---:|---:|---:|---:|",
        f"| shipped (rename now, fsync in background) | {s['median_ms']:.1f} | {s['p99_ms']:.1f} | "
        f"{s['total_s']:.2f} | {s['drain_s']:.2f} |",
        f"| inline fsync of file + folder | {f['median_ms']:.1f} | {f['p99_ms']:.1f} | "
        f"{f['total_s']:.2f} | - |",
        "",
        f"- the loop polls every 1 s; the shipped hook adds {s['total_s']:.2f} s to a "
        f"{ROLLOUTS}-rollout step "
        f"({s['median_ms'] / 10:.2f}% of a poll per rollout), inline fsync would add {f['total_s']:.2f} s",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(run())
