"""Query results a person can read: capped tables and a vertical (one field a line) layout.

The table shows at most ``max_rows`` rows and cuts each cell to ``max_width`` characters,
and its last line says what it cut and how to see it whole; newlines inside a value are
shown as ``↵`` so every row stays one line. Machine formats (csv, json, jsonl) never use
this: they carry every value whole.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any, Protocol


class Tabular(Protocol):
    """What the printers read of a result: a ``pyarrow.Table`` or a ``query.ResultRows``."""

    @property
    def column_names(self) -> list[str]: ...

    @property
    def num_rows(self) -> int: ...

    def slice(self, offset: int = 0, length: int | None = None) -> Tabular: ...

    def to_pylist(self) -> list[dict[str, Any]]: ...


NEWLINE = "↵"
ELLIPSIS = "…"


@dataclass(frozen=True)
class Limits:
    """How much of a result the readable formats show (0: no limit)."""

    max_rows: int = field(default=50, metadata={"range": {"min": 0}})
    """table/vertical: show at most this many rows (0: all)."""

    max_width: int = field(default=40, metadata={"range": {"min": 0}})
    """table: cut values to this many characters (vertical: 8 times as many; 0: never)."""


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, list | dict):
        return json.dumps(value, default=str, ensure_ascii=False)
    return str(value)


def _one_line(text: str) -> str:
    return text.replace("\r\n", NEWLINE).replace("\n", NEWLINE).replace("\r", NEWLINE).replace("\t", " ")


def _cut(text: str, width: int, value: Any = None) -> tuple[str, bool]:
    if width and len(text) > width and not isinstance(value, dt.datetime | dt.date):
        return text[: max(1, width - 1)] + ELLIPSIS, True
    return text, False


def _footer(shown: int, total: int, cut_cells: int, limits: Limits, layout: str) -> str:
    parts = [f"{total:,} row{'s' if total != 1 else ''}"]
    if shown < total:
        parts.append(f"showing the first {shown:,} (--max-rows 0 shows all)")
    if cut_cells:
        hint = "--max-width 0" + (", --format vertical" if layout == "table" else "") + " or --format json"
        values = f"{cut_cells:,} value{'s' if cut_cells != 1 else ''}"
        parts.append(f"{values} cut to {limits.max_width} characters ({hint} shows them whole)")
    return "(" + "; ".join(parts) + ")"


def _shown_rows(table: Tabular, limits: Limits) -> list[dict[str, Any]]:
    head = table.slice(0, limits.max_rows) if limits.max_rows else table
    return head.to_pylist()


def table_text(table: Tabular, limits: Limits = Limits()) -> str:
    """An aligned table: capped rows and cell widths, one line per row, and what was cut."""
    rows = _shown_rows(table, limits)
    names = table.column_names
    cut_cells = 0
    cells = []
    for r in rows:
        line = []
        for name in names:
            text, was_cut = _cut(_one_line(_text(r[name])), limits.max_width, r[name])
            cut_cells += was_cut
            line.append(text)
        cells.append(line)
    widths = [max([len(n)] + [len(c[i]) for c in cells]) for i, n in enumerate(names)]
    out = ["  ".join(n.ljust(w) for n, w in zip(names, widths, strict=True)).rstrip()]
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    out.append(_footer(len(rows), table.num_rows, cut_cells, limits, "table"))
    return "\n".join(out)


def vertical_text(table: Tabular, limits: Limits = Limits()) -> str:
    """One block per row, one ``column | value`` line per field (for wide rows), newlines kept."""
    rows = _shown_rows(table, limits)
    names = table.column_names
    pad = max((len(n) for n in names), default=0)
    cut_cells = 0
    out = []
    for i, r in enumerate(rows, 1):
        out.append(f"-[ row {i} ]" + "-" * max(0, pad + 8 - len(str(i))))
        for name in names:
            text, was_cut = _cut(_text(r[name]), limits.max_width * 8 if limits.max_width else 0, r[name])
            cut_cells += was_cut
            first, *rest = text.split("\n")
            out.append(f"{name.ljust(pad)} | {first}".rstrip())
            out += [f"{' ' * pad} | {line}".rstrip() for line in rest]
    out.append(
        _footer(
            len(rows), table.num_rows, cut_cells, Limits(limits.max_rows, limits.max_width * 8), "vertical"
        )
    )
    return "\n".join(out)
