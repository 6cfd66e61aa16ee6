"""The Python 3.12 environment that runs Agent Lightning 1.0 (``agl-server``, the trainer's hook).

agentlightning 1.x needs Python >= 3.12 while tracebank runs on 3.11 with
agentlightning 0.3, so 1.0 lives in a virtualenv of its own. It takes a minute
to build, so it is kept outside any checkout, under
``~/.cache/tracebank/envs/agl1-<key>`` (``$TRACEBANK_CACHE_DIR`` moves the root),
where ``<key>`` hashes the interpreter version and the requirements: a fresh
clone reuses it, and changing a pin builds a new one beside it.

Built under a file lock and marked ready only once pip succeeded, so a killed or
concurrent build never leaves a half-installed env that later runs would trust.

``python -m tracebank.collect.agl1_env`` builds (or finds) it and prints its folder.
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tracebank.collect.errors import CollectError
from tracebank.warehouse.layout import cache_dir

AGL1_VERSION = "1.0.2"
# numpy: agentlightning.verl.agl_rollout_manager (the trainer's rollout loop, which
# calls the hook and deletes rollouts) imports it; agentlightning itself does not require it.
REQUIREMENTS = (f"agentlightning=={AGL1_VERSION}", "numpy>=1.26,<3")
READY = ".tracebank-ready"


class Agl1EnvError(CollectError):
    """The Agent Lightning 1.0 environment cannot be found or built."""


@dataclass(frozen=True)
class Agl1Env:
    """A ready Agent Lightning 1.0 virtualenv."""

    root: Path
    """The virtualenv's folder."""

    @property
    def python(self) -> Path:
        """Its Python 3.12 interpreter."""
        return self.root / "bin" / "python"

    @property
    def agl_server(self) -> Path:
        """Its ``agl-server`` console script."""
        return self.root / "bin" / "agl-server"


def cache_root() -> Path:
    """Where slow-to-build environments live (tracebank's cache folder)."""
    return cache_dir()


def find_python312() -> tuple[Path, str]:
    """A working Python >= 3.12 and its version: ``$TRACEBANK_PYTHON312``, pyenv's, or ``python3.12``.

    Each candidate is run, because a pyenv shim on PATH exists even where it fails.
    """
    pyenv_root = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    candidates = [os.environ.get("TRACEBANK_PYTHON312")]
    candidates += sorted(glob.glob(f"{pyenv_root}/versions/3.1[2-9]*/bin/python3"), reverse=True)
    candidates.append(shutil.which("python3.12"))
    for candidate in candidates:
        version = _interpreter_version(candidate) if candidate else None
        if version and tuple(int(p) for p in version.split(".")[:2]) >= (3, 12):
            return Path(candidate or ""), version
    raise Agl1EnvError(
        "no Python 3.12 interpreter found (agentlightning 1.x needs Python >= 3.12)",
        "install one (e.g. `pyenv install 3.12`) or set TRACEBANK_PYTHON312=/path/to/python3.12",
    )


def _interpreter_version(python: str) -> str | None:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print(sys.version.split()[0])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def env_key(python_version: str, requirements: tuple[str, ...] = REQUIREMENTS) -> str:
    """The cache key of an env: what it holds, not where it was built."""
    text = "\n".join((python_version, *requirements))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def ensure_agl1_env(quiet: bool = True) -> Agl1Env:
    """The Agent Lightning 1.0 env, built on first use and reused after."""
    python, version = find_python312()
    envs = cache_root() / "envs"
    target = envs / f"agl1-{env_key(version)}"
    if (target / READY).exists():
        return Agl1Env(target)
    envs.mkdir(parents=True, exist_ok=True)
    with open(envs / f"{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building the same env
        if not (target / READY).exists():
            _build(python, target, quiet)
    return Agl1Env(target)


def _build(python: Path, target: Path, quiet: bool) -> None:
    # A venv records its own path in its scripts, so it is built at its final name;
    # the READY marker, written last, is what makes it count as built.
    shutil.rmtree(target, ignore_errors=True)
    try:
        _run([str(python), "-m", "venv", str(target)], "create the virtualenv")
        pip = [str(target / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check"]
        _run([*pip, *(["-q"] if quiet else []), *REQUIREMENTS], f"pip install {' '.join(REQUIREMENTS)}")
        (target / READY).write_text("\n".join(REQUIREMENTS) + "\n")
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise


def _run(cmd: list[str], what: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise Agl1EnvError(f"cannot {what}: {last[0]}", "check network access to the package index")


if __name__ == "__main__":
    try:
        print(ensure_agl1_env(quiet=False).root)
    except Agl1EnvError as exc:
        print(f"Error: {exc.one_line()}", file=sys.stderr)
        sys.exit(1)
