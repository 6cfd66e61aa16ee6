"""Train-stage fixtures: a tiny local model and committed dataset versions (no hub, no GPU)."""

from __future__ import annotations

import pytest
from tracebank.warehouse.location import Warehouse

from tests.fixtures.datasets import QA_PAIRS, load_tokenizer, qa_rows, write_dataset

#: Hyperparameters under which the tiny model memorises QA_PAIRS in a few seconds of CPU.
FAST = {"learning_rate": 1e-2, "epochs": 6, "batch_size": 4, "grad_accum": 1, "warmup_steps": 2}


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """A random-init tiny Qwen2 and its ChatML tokenizer, built locally once per session."""
    from tracebank.train.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"), seed=0, initializer_range=0.2)


@pytest.fixture(scope="session")
def tokenizer(tiny_model):
    return load_tokenizer(tiny_model)


@pytest.fixture(scope="module")
def qa_wh(tmp_path_factory, tokenizer):
    """A warehouse holding `qa@v1`: the QA pairs twice for training, once for validation."""
    wh = Warehouse(tmp_path_factory.mktemp("train-wh") / "warehouse").init()
    write_dataset(wh, "qa", qa_rows(tokenizer, QA_PAIRS, repeat=2), validation=qa_rows(tokenizer, QA_PAIRS))
    return wh
