"""`warehouse.layout` is the one builder of the names inside a warehouse."""

from __future__ import annotations

import re
from pathlib import Path

from tracebank.warehouse import layout

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("collect", "core", "loop", "rescore", "serve", "train", "transform", "view", "warehouse")


def test_data_file_names_are_those_committed_today():
    """Content hashes and manifests cover these names: they must not change."""
    assert layout.bronze_file("rollouts") == "rollouts-0000.parquet"
    assert layout.bronze_file("spans", 12) == "spans-0012.parquet"
    assert layout.silver_file("llm_calls", "0a1b2c3d") == "llm_calls-0a1b2c3d.parquet"
    assert layout.split_file("train") == "train.parquet"
    assert layout.split_file("validation", 3) == "validation-00003.parquet"
    assert layout.REWARD_SCORES_FILE == "scores.parquet"


def test_no_other_module_builds_a_parquet_file_name():
    """A name built in a second place drifts from the first (a reader then misses the files)."""
    literal = re.compile(r"""["'][^"'\n]*\.parquet["']""")
    builders = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == ROOT / "warehouse" / "layout.py":
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                code = line.split("#", 1)[0]
                if literal.search(code) and '"""' not in code and not code.lstrip().startswith(("``", "(")):
                    builders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert builders == []
