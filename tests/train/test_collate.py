"""The collator pads without touching the loss mask."""

from __future__ import annotations

from tracebank.train.collate import PadCollator


def test_pads_ids_labels_and_mask():
    batch = PadCollator(pad_id=0)(
        [
            {"input_ids": [5, 6, 7], "attention_mask": [1, 1, 1], "labels": [-100, 6, 7]},
            {"input_ids": [8, 9], "attention_mask": [1, 1], "labels": [-100, 9]},
        ]
    )
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 9, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["labels"].tolist() == [[-100, 6, 7], [-100, 9, -100]]


def test_truncates_keeping_the_start_and_pads_to_multiple():
    batch = PadCollator(pad_id=3, max_length=2, pad_to_multiple_of=4)(
        [
            {"input_ids": [5, 6, 7], "attention_mask": [1, 1, 1], "labels": [-100, 6, 7]},
        ]
    )
    assert batch["input_ids"].tolist() == [[5, 6, 3, 3]]
    assert batch["labels"].tolist() == [[-100, 6, -100, -100]]
    assert batch["attention_mask"].tolist() == [[1, 1, 0, 0]]
