"""scripts/gpu_check.py: its deadline and report logic, and its dry run laid out as on the GPU machine.

The dry run (``make gpu-dry-run`` runs this file) installs the tracebank wheel built from this
checkout into a ``--target`` folder with ``--no-deps``, puts that folder on PYTHONPATH with stubs that
refuse to import what the GPU machine lacks and the staging leaves out (duckdb, polars, ...), and runs
the check with ``--allow-cpu`` from the checkout as working folder, as scripts/gpu_check.sh does there.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.py"
#: Neither on the GPU image nor staged: the train path must not import them.
NOT_ON_GPU_MACHINE = ("duckdb", "polars", "orjson", "agentlightning", "plotly")
#: Loaded at start-up from PYTHONPATH: drops the editable install's finders, which would otherwise
#: resolve tracebank.* to the checkout and hide an import that works only there.
NOT_EDITABLE = """import sys
sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
sys.path_hooks[:] = [h for h in sys.path_hooks if not getattr(h, "__module__", "").startswith("__editable__")]
"""
#: The CPU dry run's sizes for the 0.5B step (its code path, not its speed).
DRY_RUN = [
    "--allow-cpu",
    "--qwen-shape",
    "tiny",
    "--rows-05b",
    "16",
    "--length-05b",
    "64",
    "--steps-05b",
    "2",
]


def _load_script(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


gpu_check = _load_script(SCRIPT, "gpu_check")


# --- the deadline, the plan and the report, with steps that only sleep ---------------------------


def _steps(**needs):
    seen = []

    def body(name, outcome):
        def run(ctx):
            seen.append((name, json.loads(ctx.report.path.read_text())["steps"][name]["status"]))
            if isinstance(outcome, Exception):
                raise outcome
            return dict(outcome)

        return run

    steps = [
        gpu_check.Step(name, body(name, outcome), needs_s=need, cap_s=100)
        for name, (need, outcome) in needs.items()
    ]
    return steps, seen


def _report(tmp_path, steps, only=(), skip=()):
    planned = gpu_check.plan(steps, list(only), list(skip))
    entries = {
        n: {"status": "skipped", "reason": why} if why else {"status": "pending"}
        for n, why in planned.items()
    }
    return gpu_check.Report(tmp_path, {"status": "running", "steps": entries})


def _run(tmp_path, steps, report, seconds):
    def context(step, deadline):
        return gpu_check.Context(tmp_path / "work" / step.name, None, report, deadline, cuda=False)

    return gpu_check.run_steps(steps, context, report, time.monotonic() + seconds)


def test_steps_that_no_longer_fit_the_deadline_are_skipped_and_each_step_is_on_disk_while_it_runs(tmp_path):
    steps, seen = _steps(a=(1, {}), big=(500, {}), c=(1, {"failures": ["wrong answer"]}))
    report = _report(tmp_path, steps)

    code = _run(tmp_path, steps, report, seconds=60)

    written = json.loads((tmp_path / "gpu_check.json").read_text())["steps"]
    assert code == 1
    assert seen == [("a", "running"), ("c", "running")]
    assert written["a"]["status"] == "passed"
    assert written["big"]["status"] == "skipped" and "no time left" in written["big"]["reason"]
    assert written["c"]["status"] == "failed" and written["c"]["error"] == "wrong answer"


def test_a_fatal_step_skips_every_later_one_and_a_failing_one_keeps_its_traceback(tmp_path):
    steps, _ = _steps(a=(1, RuntimeError("boom")), env=(1, gpu_check.Fatal("stale install")), later=(1, {}))
    report = _report(tmp_path, steps)

    code = _run(tmp_path, steps, report, seconds=60)

    written = json.loads((tmp_path / "gpu_check.json").read_text())["steps"]
    assert code == 3
    assert written["a"]["error"] == "RuntimeError: boom" and "RuntimeError" in written["a"]["traceback"]
    assert written["env"]["status"] == "failed"
    assert written["later"] == {"status": "skipped", "reason": "env failed: stale install"}


def test_only_and_skip_choose_the_steps_and_unknown_names_are_refused(tmp_path):
    steps, seen = _steps(a=(1, {}), b=(1, {}), c=(1, {}))

    assert gpu_check.plan(steps, ["a", "c"], ["c"]) == {"a": None, "b": "not in --only", "c": "in --skip"}
    with pytest.raises(SystemExit, match="unknown step"):
        gpu_check.plan(steps, ["nope"], [])


def test_a_rerun_into_the_same_folder_keeps_the_previous_report(tmp_path):
    gpu_check.Report(tmp_path, {"run": 1})
    gpu_check.Report(tmp_path, {"run": 2})

    assert json.loads((tmp_path / "gpu_check.json").read_text()) == {"run": 2}
    assert json.loads((tmp_path / "gpu_check.previous.json").read_text()) == {"run": 1}


def test_slim_wheel_drops_members_and_their_record_lines(tmp_path):
    slim_wheel = _load_script(ROOT / "scripts" / "slim_wheel.py", "slim_wheel")
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    record = "pkg/__init__.py,sha256=x,1\nstudio/app.js,sha256=y,2\npkg-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("pkg/__init__.py", "")
        zf.writestr("studio/app.js", "x" * 1000)
        zf.writestr("pkg-1.0.dist-info/RECORD", record)

    assert slim_wheel.slim(wheel, ["studio/*"]) == ["studio/app.js"]

    with zipfile.ZipFile(wheel) as zf:
        assert zf.namelist() == ["pkg/__init__.py", "pkg-1.0.dist-info/RECORD"]
        assert "studio" not in zf.read("pkg-1.0.dist-info/RECORD").decode()


# --- the dry run ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpu_layout(tmp_path_factory):
    """The wheel of this checkout installed with --target, plus stubs for what the GPU machine lacks."""
    base = tmp_path_factory.mktemp("gpu-layout")
    source = base / "source"  # built from a copy: pip would leave build/ in the checkout
    for folder in {path.relative_to(ROOT).parts[0] for path in gpu_check.package_folders().values()}:
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    pip = [sys.executable, "-m", "pip", "-q"]
    build = [*pip, "wheel", "--no-deps", "-w", str(base / "wheels"), str(source)]
    # The environment's own setuptools when it is new enough, else pip fetches one (isolated build).
    if subprocess.run([*build, "--no-build-isolation"], capture_output=True).returncode:
        subprocess.run(build, check=True, capture_output=True)
    wheel = next((base / "wheels").glob("tracebank-*.whl"))
    subprocess.run(
        [*pip, "install", "--no-deps", "--no-compile", "--target", str(base / "site"), str(wheel)], check=True
    )
    for module in NOT_ON_GPU_MACHINE:
        (base / "absent" / module).mkdir(parents=True)
        (base / "absent" / module / "__init__.py").write_text(
            f"raise ImportError('{module} is not on the GPU machine')\n"
        )
    (base / "absent" / "sitecustomize.py").write_text(NOT_EDITABLE)
    env = {
        **os.environ,
        "PYTHONPATH": f"{base / 'site'}{os.pathsep}{base / 'absent'}",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "TOKENIZERS_PARALLELISM": "false",
    }
    return base, env


def _check(base, env, *arguments, **popen):
    command = [
        sys.executable,
        "-P",
        str(SCRIPT),
        "--out",
        str(base / "out"),
        "--work-root",
        str(base / "work"),
        *DRY_RUN,
        *arguments,
    ]
    return subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen
    )


def _report_of(base):
    return json.loads((base / "out" / "gpu_check.json").read_text())


@pytest.fixture(scope="module")
def dry_run(gpu_layout):
    base, env = gpu_layout
    proc = _check(base, env, "--deadline-s", "400")
    output, _ = proc.communicate(timeout=480)
    return proc.returncode, output, _report_of(base)


def test_the_dry_run_passes_every_step_a_cpu_can_run_on_the_installed_wheel(dry_run, gpu_layout):
    code, output, report = dry_run
    steps = {name: entry["status"] for name, entry in report["steps"].items()}

    assert code == 0, output[-5000:]
    assert report["status"] == "passed"
    assert steps == {
        "environment": "passed", "kernel_smoke": "passed", "memorise_trl": "passed", "speed_05b": "passed",
        "unsloth_4bit": "skipped", "trl_4bit": "skipped", "fsdp_full": "skipped", "torchrun_nproc1": "passed",
        "resume_after_kill": "passed",
    }  # fmt: skip
    environment = report["steps"]["environment"]["result"]
    assert environment["tracebank_location"] == str(gpu_layout[0] / "site" / "tracebank")
    assert environment["auto_resolves_to"]["backend"] == "trl"
    for name in ("memorise_trl", "torchrun_nproc1", "resume_after_kill"):
        assert report["steps"][name]["result"]["resolved"]["backend"] == "trl"
    assert report["steps"]["memorise_trl"]["result"]["answers_right"] >= 3
    assert set(report["steps"]["speed_05b"]["tokens_per_s"]) == {"unpacked", "packed"}
    attempts = report["steps"]["resume_after_kill"]["result"]["attempts"]
    assert [a["status"] for a in attempts] == ["failed", "succeeded"]
    assert "GPU CHECK PASSED" in (gpu_layout[0] / "out" / "gpu_check.log").read_text()


def test_a_stale_install_is_refused_before_any_model_is_built(gpu_layout, tmp_path):
    base, env = gpu_layout
    stale = tmp_path / "site"
    shutil.copytree(base / "site", stale)
    (stale / "tracebank" / "train" / "runner.py").write_text("# an older runner\n")

    proc = subprocess.run(
        [sys.executable, "-P", str(SCRIPT), "--verify-source"],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(stale)},
        capture_output=True,
        text=True,
    )

    assert proc.returncode == 3
    assert "tracebank.train.runner" in proc.stdout


def test_sigterm_mid_step_leaves_a_report_of_what_ran_and_what_was_cut(dry_run, gpu_layout):
    """A rerun into the same OUT (a fresh work folder), stopped by SIGTERM while it trains."""
    base, env = gpu_layout
    first_work = dry_run[2]["work"]
    proc = _check(base, env, "--deadline-s", "300", "--only", "memorise_trl,resume_after_kill")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        report = _report_of(base)
        if report.get("work") != first_work and list(Path(report["work"]).rglob("train.log")):
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=60)

    report = _report_of(base)
    steps = report["steps"]
    assert proc.returncode == 143, output[-3000:]
    assert report["status"] == "interrupted"
    assert steps["environment"]["status"] == "passed"
    assert steps["memorise_trl"]["status"] == "failed"
    assert "SIGTERM" in steps["memorise_trl"]["error"]
    assert steps["memorise_trl"]["train_logs"]
    assert steps["resume_after_kill"]["status"] == "skipped"
    assert steps["kernel_smoke"] == {"status": "skipped", "reason": "not in --only"}
    assert json.loads((base / "out" / "gpu_check.previous.json").read_text())["work"] == first_work
    children = subprocess.run(["pgrep", "-f", report["work"]], capture_output=True, text=True).stdout.split()
    assert children == []
