"""Start-up: how long a whole `tracebank` process takes to answer, as a user waits for it.

Each command runs as a fresh process (the installed `tracebank` entry point), several times;
the median and the fastest run are shown, beside `git --version` as a reference for a tool that
answers at once. Goals (issue 21): `--help` and `--version` under 0.15 s, `sql "SELECT 1"` under 0.4 s.
"""

from __future__ import annotations

import os
import resource
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


def user_env() -> dict[str, str]:
    """The environment a timed `tracebank` process runs with, as a user's would: with the bytecode
    cache (an installed package has one; a shell that sets PYTHONDONTWRITEBYTECODE would time
    compiling every module it imports on every start instead)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    return env


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _time(cmd: list[str], env: dict[str, str]) -> tuple[list[float], list[float]]:
    """Wall and CPU (user + system) seconds of each run: CPU time barely moves when other work
    shares the cores, wall time does."""
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # writes .pyc
    walls, cpus = [], []
    for _ in range(RUNS):
        cpu, t = _children_cpu(), time.perf_counter()
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        walls.append(time.perf_counter() - t)
        cpus.append(_children_cpu() - cpu)
    return walls, cpus


def _small_warehouse(root: Path, env: dict[str, str]) -> None:
    """A warehouse with something in every catalog: one collection (with its silver cache) and
    one dataset version, so `sql` builds every view it would for a user."""
    from tracebank.warehouse.location import Warehouse

    from tests.fixtures.bronze import commit_collection, synthetic_rollouts

    spans, rollouts = synthetic_rollouts(20, seed=2024)
    commit_collection(Warehouse(root).init(), spans, rollouts=rollouts)
    subprocess.run(
        [*_tracebank(), "-w", str(root), "transform", "--dataset", "startup"],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def run() -> str:
    env = user_env()
    with tempfile.TemporaryDirectory() as tmp:
        wh = str(Path(tmp) / "wh")
        _small_warehouse(Path(wh), env)
        commands = {
            "--version": [*_tracebank(), "--version"],
            "--help": [*_tracebank(), "--help"],
            'sql "SELECT 1"': [*_tracebank(), "-w", wh, "sql", "SELECT 1"],
        }
        git = [shutil.which("git") or "git", "--version"]
        rows: list[tuple[str, tuple[list[float], list[float]], float | None]] = [
            ("git --version (reference)", _time(git, env), None)
        ]
        rows += [(f"tracebank {name}", _time(cmd, env), GOALS[name]) for name, cmd in commands.items()]
    lines = [
        "## startup: a whole `tracebank` process, as a user waits for it",
        "",
        f"Each command ran {RUNS} times as a fresh process (after one run that writes the bytecode "
        "cache), `sql` over a warehouse holding a collection and a dataset version; load average "
        "at the start: "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}.",
        "",
        "| command | median s | fastest s | median CPU s | goal | |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for name, (walls, cpus), goal in rows:
        med, best, cpu = statistics.median(walls), min(walls), statistics.median(cpus)
        verdict = "" if goal is None else ("met" if med < goal else "missed")
        lines.append(
            f"| {name} | {med:.3f} | {best:.3f} | {cpu:.3f} | {'' if goal is None else goal} | {verdict} |"
        )
    return "\n".join(lines) + "\n"
