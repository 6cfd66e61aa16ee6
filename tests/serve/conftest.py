"""Fixtures of the serve tests: a tiny local model and the CPU server serving it."""

from __future__ import annotations

import pytest
from tracebank.serve.process import start_cpu_server

MODEL_NAME = "tiny"


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A random-init tiny Qwen2 model with a ChatML tokenizer (built locally, seconds)."""
    from tracebank.train.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model_dir))


@pytest.fixture(scope="session")
def cpu_server(tiny_model_dir, tmp_path_factory):
    """``python -m serve.cpu_server`` serving the tiny model as ``tiny`` (stateless, so shared)."""
    log = tmp_path_factory.mktemp("cpu-server") / "server.log"
    with start_cpu_server(
        tiny_model_dir,
        served_model_name=MODEL_NAME,
        max_model_len=512,
        default_max_tokens=16,
        log_path=log,
        threads=1,
    ) as server:
        yield server
