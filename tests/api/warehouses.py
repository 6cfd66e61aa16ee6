"""Warehouses the API tests share: built once per module, copied for each test that writes.

A copy is a plain folder copy of a committed warehouse, so the library and the CLI can each be given
the same starting point and their results compared byte for byte.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result
from tracebank.warehouse.location import Warehouse

from tests.fixtures.bronze import commit_collection
from tests.fixtures.preference import commit_03, plan
from tests.fixtures.proxy_spans import Call, call_spans, reward_span
from tracebank.cli.main import cli


def sft_spans() -> list[Any]:
    """Four rollouts of two calls each, three rewarded, one rejected call (as tests/transform's)."""
    spans: list[Any] = []
    for i in range(4):
        r, a = f"r{i}", f"r{i}-a1"
        spans += call_spans(r, a, 1, Call(list(range(10 + i)), [1, 2, 3]), 1.0)
        spans += call_spans(r, a, 2, Call(list(range(20)), [4, 5]), 2.0)
        if i < 3:
            spans.append(reward_span(r, a, 3, 0.25 * (i + 1), 3.0))
    spans += call_spans("r0", "r0-a1", 4, Call([], [1]), 4.0)  # rejected: empty prompt
    return spans


def build_base(root: Path, silver: bool = True) -> Path:
    """A warehouse at ``root`` holding an SFT collection ``c1`` and a same-task collection ``c2``
    (preference pairs); their silver tables built unless ``silver`` is off."""
    wh = Warehouse(root).init()
    commit_collection(wh, sft_spans(), collection_id="c1", silver=silver)
    commit_03(wh, plan(seed=5, tasks=30))
    if not silver:
        shutil.rmtree(wh.silver_dir)
        wh.silver_dir.mkdir()
    return root


def copy_of(base: Path, dest: Path) -> Path:
    shutil.copytree(base, dest, symlinks=True)
    return dest


def run_cli(root: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--warehouse", str(root), *args], catch_exceptions=False)
