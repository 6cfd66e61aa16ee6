"""`tracebank inspect`: what one row of a dataset version actually trains on, plus its histograms.

Look before training: the row is decoded with the model's tokenizer and split into the
masked part (label -100: the prompt, no loss) and the trained part (the response). On a
terminal the masked text is dimmed and the trained text highlighted; elsewhere (pipes,
logs, tests) plain markers are used: ``[-masked-]`` and ``{+trained+}``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from tracebank.core.text import visible
from tracebank.train.dataset import open_version
from tracebank.train.errors import TrainError
from tracebank.warehouse.contract import IGNORE_INDEX
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.storage import read_table

DIM, BOLD_GREEN, RESET = "\x1b[2m", "\x1b[1;32m", "\x1b[0m"


def _segments(input_ids: list[int], labels: list[int]) -> list[tuple[bool, list[int]]]:
    """Consecutive runs of (trained?, token ids)."""
    out: list[tuple[bool, list[int]]] = []
    for token, label in zip(input_ids, labels, strict=True):
        trained = label != IGNORE_INDEX
        if out and out[-1][0] == trained:
            out[-1][1].append(token)
        else:
            out.append((trained, [token]))
    return out


def render_row(segments: list[tuple[bool, str]], color: bool) -> str:
    """A row's decoded text, trained parts marked; text a model or tool wrote is shown with its
    control characters made visible, so it cannot drive the terminal (issue 18)."""
    parts = []
    for trained, raw in segments:
        text = visible(raw)
        if color:
            parts.append(f"{BOLD_GREEN if trained else DIM}{text}{RESET}")
        else:
            parts.append(f"{{+{text}+}}" if trained else f"[-{text}-]")
    return "".join(parts)


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


def inspect_dataset(
    wh: Warehouse, ref: str, tokenizer: str | Path, row: int = 0, split: str = "train", color: bool = False
) -> str:
    """A row of ``ref`` decoded with masked/trained marks, then length and reward histograms."""

    wh.check_format()
    version = open_version(wh, ref)
    version.storage.check_sizes(version.folder, version.record)
    files = version.split_files()
    if split not in files:
        raise TrainError(
            f"dataset {version.label} has no {split!r} split", f"its splits: {', '.join(sorted(files))}"
        )
    table = read_table(files[split], columns=["input_ids", "labels", "reward"])
    if not 0 <= row < table.num_rows:
        raise TrainError(f"row {row} is out of range", f"{version.label} {split} has {table.num_rows} rows")
    record: dict[str, Any] = table.slice(row, 1).to_pylist()[0]
    tok = _load_tokenizer(tokenizer)
    ids, labels = record["input_ids"], record["labels"]
    if ids and max(ids) >= len(tok):
        raise TrainError(
            f"row {row} holds token id {max(ids)}, beyond this tokenizer's {len(tok)} tokens",
            "the dataset was built with another tokenizer",
        )
    segments = [
        (trained, tok.decode(chunk, skip_special_tokens=False)) for trained, chunk in _segments(ids, labels)
    ]
    trained = sum(1 for label in labels if label != IGNORE_INDEX)
    legend = (
        f"legend: {DIM}masked (no loss){RESET} {BOLD_GREEN}trained{RESET}"
        if color
        else "legend: [-masked (no loss)-] {+trained+}"
    )
    out = [
        f"{version.label} {split} row {row} of {table.num_rows}: {len(ids)} tokens, "
        f"{len(ids) - trained} masked, {trained} trained, reward {record.get('reward')}",
        legend,
        "",
        render_row(segments, color),
        "",
    ]
    lengths, rewards = [], []
    for paths in files.values():
        t = read_table(paths, columns=["input_ids", "reward"])
        import pyarrow.compute as pc

        lengths += pc.list_value_length(t.column("input_ids")).to_pylist()
        rewards += [r for r in t.column("reward").to_pylist() if r is not None]
    out.append(
        f"row lengths in tokens ({len(lengths)} rows, all splits; min {min(lengths)}, max {max(lengths)}):"
    )
    out += histogram([float(v) for v in lengths], color=color, integer=True)
    out.append(f"rewards ({len(rewards)} rows):")
    out += histogram(rewards, color=color)
    return "\n".join(out)


def _load_tokenizer(path: str | Path) -> Any:
    from transformers import AutoTokenizer

    folder = Path(path).expanduser()
    if not folder.exists():
        raise TrainError(f"tokenizer folder {folder} does not exist", "pass --tokenizer the model folder")
    try:
        return AutoTokenizer.from_pretrained(str(folder))
    except (OSError, ValueError) as exc:
        raise TrainError(f"cannot load a tokenizer from {folder}: {str(exc).splitlines()[0]}") from exc
