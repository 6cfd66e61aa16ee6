"""Exact packing: a packed batch's per-token losses equal the unpacked rows', masked tokens stay
masked across row boundaries, and a packed run trains what an unpadded one does."""

from __future__ import annotations

import json

import pytest
from tracebank.train import TrainConfig, train
from tracebank.train.collate import PackCollator, PadCollator
from tracebank.warehouse import catalog
from tracebank.warehouse.contract import IGNORE_INDEX

from tests.fixtures.datasets import QA_PAIRS, qa_rows


def _token_losses(logits, labels):
    """Cross-entropy of every trained next-token prediction, in sequence order."""
    import torch

    out = []
    for row_logits, row_labels in zip(logits, labels, strict=True):
        targets = row_labels[1:]
        trained = targets != IGNORE_INDEX
        losses = torch.nn.functional.cross_entropy(
            row_logits[:-1][trained], targets[trained], reduction="none"
        )
        out += losses.tolist()
    return out


@pytest.fixture(scope="module")
def model(tiny_model):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def rows(tokenizer):
    picked = qa_rows(tokenizer, QA_PAIRS)[:5]
    assert len({len(r["input_ids"]) for r in picked}) > 1  # rows of different lengths: padding matters
    return picked


def test_packed_per_token_losses_equal_unpacked(model, rows, tokenizer):
    import torch

    padded = PadCollator(pad_id=tokenizer.pad_token_id)(rows)
    packed = PackCollator()(rows)
    assert packed["input_ids"].shape == (1, sum(len(r["input_ids"]) for r in rows))  # no padding at all
    # As in training: no KV cache (transformers reads row boundaries from position ids only without one).
    with torch.no_grad():
        unpacked_logits = model(
            input_ids=padded["input_ids"], attention_mask=padded["attention_mask"], use_cache=False
        ).logits
        packed_logits = model(
            input_ids=packed["input_ids"], position_ids=packed["position_ids"], use_cache=False
        ).logits
    unpacked = _token_losses(unpacked_logits, padded["labels"])
    together = _token_losses(packed_logits, packed["labels"])
    assert len(together) == len(unpacked) == sum(sum(x != IGNORE_INDEX for x in r["labels"]) for r in rows)
    assert together == pytest.approx(unpacked, abs=1e-5)

    # The check can fail: the same sequence with one run of positions lets rows see each other.
    plain = torch.arange(packed["input_ids"].shape[1]).unsqueeze(0)
    with torch.no_grad():
        leaking = _token_losses(
            model(input_ids=packed["input_ids"], position_ids=plain, use_cache=False).logits, packed["labels"]
        )
    assert leaking != pytest.approx(unpacked, abs=1e-3)


def test_masked_tokens_stay_masked_across_row_boundaries(rows):
    packed = PackCollator()(rows)
    labels, positions = packed["labels"][0].tolist(), packed["position_ids"][0].tolist()
    starts = [i for i, p in enumerate(positions) if p == 0]
    assert len(starts) == len(rows)
    assert all(labels[i] == IGNORE_INDEX for i in starts)  # no row's first token is a target
    flat = [x for r in rows for x in [IGNORE_INDEX, *r["labels"][1:]]]
    assert labels == flat  # every prompt token stays masked, every answer token stays trained


def test_a_packed_run_has_the_unpacked_losses(qa_wh, tiny_model, tmp_path, monkeypatch):
    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.setenv(key, "1")
    recipe = {"learning_rate": 1e-2, "batch_size": 4, "grad_accum": 1, "warmup_steps": 0, "max_steps": 3}
    losses = {}
    for packing in (False, True):
        config = TrainConfig(
            dataset="qa@v1",
            base_model=str(tiny_model),
            output=str(tmp_path / f"packing-{packing}"),
            seed=0,
            save="lora",
            eval_strategy="no",
            packing=packing,
            **recipe,
        )
        folder, _ = catalog.resolve_run(qa_wh, train(qa_wh, config).run_id)
        lines = (folder / "metrics.jsonl").read_text().splitlines()
        losses[packing] = [m["loss"] for m in map(json.loads, lines) if m.get("split") == "train"]
    assert losses[True] == pytest.approx(losses[False], abs=1e-4)
