"""Batching pre-tokenized rows, never re-tokenizing: padded to the longest row, or packed.

Rows arrive as the transform stage wrote them (prompt tokens labelled -100, response
tokens labelled with themselves), so the labels are used exactly as stored: padding gets
label -100 and attention 0, and nothing else about the loss mask is decided here.

Packed (``--packing``), a batch is one sequence, the rows end to end with no padding and
position ids restarting at 0 for each row. Without an attention mask, transformers reads row
boundaries from the position ids and keeps rows apart (a block-diagonal causal mask on sdpa
and eager, variable-length kernels on flash-attention), so each token sees exactly what it
sees unpacked. A row's first label is set to -100: it would be the target of the previous
row's last token, which unpacked has no next token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tracebank.warehouse.contract import IGNORE_INDEX


@dataclass
class PadCollator:
    """Right-pads input_ids (with ``pad_id``), labels (-100) and attention_mask (0)."""

    pad_id: int
    #: rows longer than this are cut, keeping the start (only when the run allows truncation)
    max_length: int | None = None
    pad_to_multiple_of: int | None = None

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        cut = self.max_length
        ids = [list(r["input_ids"])[:cut] if cut else list(r["input_ids"]) for r in rows]
        labels = [list(r["labels"])[:cut] if cut else list(r["labels"]) for r in rows]
        masks = [
            list(r.get("attention_mask") or [1] * len(i))[: len(i)] for r, i in zip(rows, ids, strict=True)
        ]
        width = max(len(i) for i in ids)
        if self.pad_to_multiple_of:
            m = self.pad_to_multiple_of
            width = (width + m - 1) // m * m

        def pad(seqs: list[list[int]], value: int) -> Any:
            return torch.tensor([s + [value] * (width - len(s)) for s in seqs], dtype=torch.long)

        return {
            "input_ids": pad(ids, self.pad_id),
            "attention_mask": pad(masks, 0),
            "labels": pad(labels, IGNORE_INDEX),
        }


@dataclass
class PackCollator:
    """Concatenates a batch's rows into one padding-free sequence with per-row position ids."""

    #: rows longer than this are cut, keeping the start (only when the run allows truncation)
    max_length: int | None = None

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        cut = self.max_length
        ids: list[int] = []
        labels: list[int] = []
        positions: list[int] = []
        for row in rows:
            row_ids = list(row["input_ids"])[:cut] if cut else list(row["input_ids"])
            row_labels = list(row["labels"])[: len(row_ids)]
            ids += row_ids
            labels += [IGNORE_INDEX, *row_labels[1:]]
            positions += range(len(row_ids))
        return {
            "input_ids": torch.tensor([ids], dtype=torch.long),
            "position_ids": torch.tensor([positions], dtype=torch.long),
            "labels": torch.tensor([labels], dtype=torch.long),
        }
