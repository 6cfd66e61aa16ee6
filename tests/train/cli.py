"""The train CLI as the tests run it: a fresh process, one thread per math library (so losses
repeat exactly and two ranks do not fight over the two cores)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SINGLE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def train_cli(root: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``tracebank -w ROOT train --quiet ARGS`` in a fresh single-threaded process."""
    return subprocess.run(
        [sys.executable, "-m", "tracebank.cli.main", "-w", str(root), "train", "--quiet", *args],
        env={**os.environ, **SINGLE_THREAD},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
