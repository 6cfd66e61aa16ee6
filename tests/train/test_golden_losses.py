"""Golden values: the exact losses of the first training steps of the tiny model, fixed seed.

A TRL, transformers, PEFT or torch upgrade (or a change of ours) that changes what training
computes moves these numbers and fails here, instead of passing the looser "loss falls"
checks. Model: torchtune's tests/recipes/test_lora_finetune_single_device.py.

When an upgrade changes them on purpose, rerun with ``GOLDEN_PRINT=1`` (``-s``) and paste
the printed values, saying in the commit which upgrade moved them and why that is right.
"""

from __future__ import annotations

import json
import os

import pytest
from tracebank.train import TrainConfig, train
from tracebank.warehouse import catalog

from tests.train.cli import SINGLE_THREAD

#: One CPU thread in the training child: float sums in another order differ in the last bits.
#: The recipe under test: qa@v1, batch 4, one gradient step per batch, no warm-up.
GOLDEN_CONFIG = {"learning_rate": 1e-2, "batch_size": 4, "grad_accum": 1, "warmup_steps": 0, "max_steps": 4}
GOLDEN_TRAIN_LOSSES = [7.166727542877197, 5.426361083984375, 4.180925369262695, 4.158657073974609]
#: torchtune's tolerance; different library versions that compute the same thing stay well inside it.
TOLERANCE = {"rel": 1e-4, "abs": 1e-4}


def _train_losses(wh, tiny_model, out, monkeypatch, **overrides) -> list[float]:
    for key, value in SINGLE_THREAD.items():
        monkeypatch.setenv(key, value)
    config = TrainConfig(
        dataset="qa@v1", base_model=str(tiny_model), output=str(out), seed=0, **{**GOLDEN_CONFIG, **overrides}
    )
    record = train(wh, config)
    folder, _ = catalog.resolve_run(wh, record.run_id)
    metrics = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    losses = [m["loss"] for m in metrics if m.get("split") == "train" and m.get("loss") is not None]
    if os.environ.get("GOLDEN_PRINT"):
        print("train losses:", losses)
    return losses


@pytest.fixture(scope="module")
def golden_losses(qa_wh, tiny_model, tmp_path_factory):
    with pytest.MonkeyPatch.context() as monkeypatch:
        return _train_losses(qa_wh, tiny_model, tmp_path_factory.mktemp("golden") / "model", monkeypatch)


def test_first_steps_have_the_golden_losses(golden_losses):
    assert len(golden_losses) == GOLDEN_CONFIG["max_steps"]
    assert golden_losses == pytest.approx(GOLDEN_TRAIN_LOSSES, **TOLERANCE)


def test_a_different_learning_rate_breaks_the_golden_losses(qa_wh, tiny_model, tmp_path, monkeypatch):
    """The check can fail: the same run with another learning rate leaves the tolerance by far."""
    changed = _train_losses(qa_wh, tiny_model, tmp_path / "model", monkeypatch, learning_rate=5e-3)
    assert changed[0] == pytest.approx(GOLDEN_TRAIN_LOSSES[0], **TOLERANCE)  # step 1 precedes any update
    assert changed[1:] != pytest.approx(GOLDEN_TRAIN_LOSSES[1:], **TOLERANCE)
