"""A warehouse to look at: the QA dataset built the real way, plus tool-calling and odd rollouts.

``qa@v1`` (tests.fixtures.datasets.transform_dataset) round-trips exactly through the tiny
model's chat template. ``mixed@v1`` is built from ``tool_and_edge_spans``: a two-call
tool-calling rollout and two calls whose stored ids cannot round-trip (a reply cut by
max-tokens, a reply holding a lone UTF-8 lead byte).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tracebank.train.tiny_model import build_tiny_model
from tracebank.transform import TransformConfig, transform
from tracebank.warehouse.location import Warehouse

from tests.fixtures.bronze import commit_collection
from tests.fixtures.datasets import SYSTEM, load_tokenizer, transform_dataset
from tests.view.tool_spans import tool_and_edge_spans


@dataclass
class ViewWarehouse:
    wh: Warehouse
    model: Path
    tokenizer: Any
    qa_collection: str
    mixed_collection: str


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"), initializer_range=0.2)


@pytest.fixture(scope="module")
def view_wh(tmp_path_factory, tiny_model) -> ViewWarehouse:
    wh = Warehouse(tmp_path_factory.mktemp("view") / "warehouse").init()
    tokenizer = load_tokenizer(tiny_model)
    transform_dataset(wh, "qa", tokenizer, repeat=2, val_fraction=0.25)
    qa_cid = next(p.name for p in wh.collections_dir.iterdir())
    mixed_cid = commit_collection(wh, tool_and_edge_spans(tokenizer, SYSTEM), tag="mixed")
    transform(wh, TransformConfig(name="mixed", collections=(mixed_cid,)))
    return ViewWarehouse(wh, tiny_model, tokenizer, qa_cid, mixed_cid)
