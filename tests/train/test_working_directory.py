"""`tracebank train` from a project folder that holds its own train.py, warehouse.py, ..."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.fixtures.shadow import shadowing_project


def test_train_runs_from_a_folder_with_a_train_py(qa_wh, tiny_model, tmp_path):
    project = shadowing_project(tmp_path / "project")
    tracebank = Path(sys.executable).with_name("tracebank")
    args = [
        "train",
        "--dataset",
        "qa",
        "--base-model",
        str(tiny_model),
        "--output",
        "out/x",
        "--max-steps",
        "1",
    ]
    done = subprocess.run(
        [str(tracebank), "--warehouse", str(qa_wh.root), *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "USER" not in done.stdout + done.stderr
    assert (project / "out" / "x" / "config.json").exists()
