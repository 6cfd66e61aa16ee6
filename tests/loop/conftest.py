"""Loop fixtures: a tiny local model to serve (``version_0``) and its tokenizer."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def model_v0(tmp_path_factory):
    """A random-init tiny Qwen2 with a ChatML tokenizer, as ``models/version_0`` (built in seconds)."""
    from tracebank.train.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("models") / "version_0", seed=0, initializer_range=0.2)


@pytest.fixture(scope="module")
def tokenizer(model_v0):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_v0))
