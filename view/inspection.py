"""`inspect`: what one row of a dataset version trains on, plus length and reward histograms.

Look before training: the row is decoded with the model's tokenizer and its masked and trained
tokens marked (``view.tokens``: the one marker style, shared with `show --dataset --tokenizer`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from tracebank.view.config import InspectConfig
from tracebank.view.errors import NothingToShowError, ViewError, ViewUsageError
from tracebank.view.tokenizer import load_tokenizer
from tracebank.view.tokens import decoder, legend, marked_tokens
from tracebank.warehouse.catalog import resolve_dataset
from tracebank.warehouse.contract import IGNORE_INDEX
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.storage import Storage, read_table


def inspect(wh: Warehouse, config: InspectConfig) -> str:
    """Row ``config.row`` of ``config.split`` of ``config.dataset`` decoded with masked/trained
    marks, then histograms of row lengths (every split) and rewards."""
    wh.check_format()
    label, files = _split_files(wh, config.dataset)
    if config.split not in files:
        raise NothingToShowError(
            f"dataset {label} has no {config.split!r} split", f"its splits: {', '.join(sorted(files))}"
        )
    table = read_table(files[config.split], columns=["input_ids", "labels", "reward"])
    if not 0 <= config.row < table.num_rows:
        raise NothingToShowError(
            f"row {config.row} is out of range", f"{label} {config.split} has {table.num_rows} rows"
        )
    record: dict[str, Any] = table.slice(config.row, 1).to_pylist()[0]
    ids, labels = record["input_ids"], record["labels"]
    tok = load_tokenizer(config.tokenizer)
    if ids and max(ids) >= len(tok):
        raise ViewError(
            f"row {config.row} holds token id {max(ids)}, beyond this tokenizer's {len(tok)} tokens",
            "the dataset was built with another tokenizer",
        )
    trained = sum(1 for x in labels if x != IGNORE_INDEX)
    out = [
        f"{label} {config.split} row {config.row} of {table.num_rows}: {len(ids)} tokens, "
        f"{len(ids) - trained} masked, {trained} trained, reward {record.get('reward')}",
        legend(config.color),
        "",
        marked_tokens(ids, labels, decoder(tok), config.color),
        "",
    ]
    return "\n".join(out + _histograms(files, config.color))


def _split_files(wh: Warehouse, ref: str) -> tuple[str, dict[str, list[Path]]]:
    """``NAME@vN`` and the local files of each split of an SFT version (sizes checked)."""
    resolved, folder, manifest = resolve_dataset(wh, ref)
    label = f"{resolved.name}@v{resolved.version}"
    if manifest.kind == "preference":
        raise ViewUsageError(
            f"{label} is a preference version: its rows are pairs, not trained tokens",
            f"show a pair with `tracebank show --dataset {label} --row N`",
        )
    storage = Storage(wh)
    storage.check_sizes(folder, manifest)
    files = {split: storage.entry_paths(folder, entries) for split, entries in manifest.split_files().items()}
    return label, files


def _histograms(files: dict[str, list[Path]], color: bool) -> list[str]:
    import pyarrow.compute as pc

    lengths: list[int] = []
    rewards: list[float] = []
    for paths in files.values():
        t = read_table(paths, columns=["input_ids", "reward"])
        lengths += pc.list_value_length(t.column("input_ids")).to_pylist()
        rewards += [r for r in t.column("reward").to_pylist() if r is not None]
    return [
        f"row lengths in tokens ({len(lengths)} rows, all splits; min {min(lengths)}, max {max(lengths)}):",
        *histogram([float(v) for v in lengths], color=color, integer=True),
        f"rewards ({len(rewards)} rows):",
        *histogram(rewards, color=color),
    ]


def histogram(
    values: list[float], bins: int = 8, width: int = 40, color: bool = False, integer: bool = False
) -> list[str]:
    """Text bars: one line per bin (or per distinct value when there are few)."""
    if not values:
        return ["  (no values)"]
    bar_char = "█" if color else "#"
    distinct = sorted(set(values))
    if len(distinct) <= bins:
        labelled = [(_fmt(v, integer), sum(1 for x in values if x == v)) for v in distinct]
    else:
        lo, hi = min(values), max(values)
        step = (hi - lo) / bins
        counts = [0] * bins
        for v in values:
            counts[min(bins - 1, int((v - lo) / step))] += 1
        labelled = []
        for i, count in enumerate(counts):
            a, b = lo + i * step, lo + (i + 1) * step
            if integer:
                # bin i holds a <= v < b, so its last integer is ceil(b) - 1
                labelled.append((f"{math.ceil(a)}-{math.ceil(b) - 1 if i < bins - 1 else int(hi)}", count))
            else:
                labelled.append((f"{a:.3g} to {b:.3g}", count))
    top = max(c for _, c in labelled)
    label_w = max(len(label) for label, _ in labelled)
    return [
        f"  {label:>{label_w}} | {bar_char * max(1 if c else 0, round(width * c / top))} {c}"
        for label, c in labelled
    ]


def _fmt(value: float, integer: bool) -> str:
    return str(int(value)) if integer else f"{value:g}"
