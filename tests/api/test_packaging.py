"""The API ships: an installed tracebank (a wheel, not this source tree) has ``tracebank.api``."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_of_the_tracebank_folder_is_installed():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    folders = {
        "tracebank." + init.parent.relative_to(ROOT / "tracebank").as_posix().replace("/", ".")
        for init in (ROOT / "tracebank").glob("*/**/__init__.py")
    }
    assert "tracebank.api" in folders
    assert folders - listed == set()
