"""Start-up: how long a whole `tracebank` process takes to answer, as a user waits for it.

Each command runs as a fresh process (the installed `tracebank` entry point), several times;
the median and the fastest run are shown, beside `git --version` as a reference for a tool that
answers at once. Goals (issue 21): `--help` and `--version` under 0.15 s, `sql "SELECT 1"` under 0.4 s.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNS = 9
GOALS = {"--version": 0.15, "--help": 0.15, 'sql "SELECT 1"': 0.4}


def _tracebank() -> list[str]:
    exe = Path(sys.executable).with_name("tracebank")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "tracebank.cli.main"]


def _time(cmd: list[str], env: dict[str, str]) -> list[float]:
    times = []
    for _ in range(RUNS):
        t = time.perf_counter()
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - t)
    return times


def run() -> str:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    with tempfile.TemporaryDirectory() as tmp:
        wh = str(Path(tmp) / "wh")
        subprocess.run(
            [*_tracebank(), "-w", wh, "gc"], env=env, capture_output=True
        )  # no warehouse yet: fine
        from tracebank.warehouse.location import Warehouse

        Warehouse(Path(wh)).init()
        commands = {
            "--version": [*_tracebank(), "--version"],
            "--help": [*_tracebank(), "--help"],
            'sql "SELECT 1"': [*_tracebank(), "-w", wh, "sql", "SELECT 1"],
        }
        rows = [("git --version (reference)", _time([shutil.which("git") or "git", "--version"], env), None)]
        rows += [(f"tracebank {name}", _time(cmd, env), GOALS[name]) for name, cmd in commands.items()]
    lines = [
        "## startup: a whole `tracebank` process, as a user waits for it",
        "",
        f"Each command ran {RUNS} times as a fresh process; load average at the start: "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}.",
        "",
        "| command | median s | fastest s | goal | |",
        "|---|---:|---:|---:|---|",
    ]
    for name, times, goal in rows:
        med, best = statistics.median(times), min(times)
        verdict = "" if goal is None else ("met" if med < goal else "missed")
        lines.append(f"| {name} | {med:.3f} | {best:.3f} | {'' if goal is None else goal} | {verdict} |")
    return "\n".join(lines) + "\n"
