"""Rendering Arrow tables for the terminal: table, csv, json (one document) or jsonl.

Only the ``table`` format shortens long cells; machine formats carry every value whole.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import click
import pyarrow as pa


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list | dict):
        text = json.dumps(value, default=str)
        return text if len(text) <= 60 else text[:57] + "..."
    return str(value)


def _table(table: pa.Table, rows: list[dict[str, Any]]) -> str:
    cells = [[_cell(v) for v in r.values()] for r in rows]
    widths = [max([len(n)] + [len(c[i]) for c in cells]) for i, n in enumerate(table.column_names)]
    line = "  ".join(n.ljust(w) for n, w in zip(table.column_names, widths, strict=True))
    out = [line.rstrip(), "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out)


def _csv(table: pa.Table, rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(table.column_names)
    for r in rows:
        writer.writerow([json.dumps(v) if isinstance(v, list | dict) else v for v in r.values()])
    return buf.getvalue().rstrip("\n")


def render(table: pa.Table, fmt: str = "table") -> str:
    """``table`` as an aligned text table, CSV, one JSON array (a row a line) or JSON lines.

    An empty result is ``""`` in ``jsonl`` and ``[]`` in ``json`` (still one document).
    """
    rows = table.to_pylist()
    if fmt == "jsonl":
        return "\n".join(json.dumps(r, default=str) for r in rows)
    if fmt == "json":
        return "[" + ",\n ".join(json.dumps(r, default=str) for r in rows) + "]"
    if fmt == "csv":
        return _csv(table, rows)
    return _table(table, rows)


def echo_rows(table: pa.Table, fmt: str = "table") -> None:
    """Print ``render(table, fmt)``; nothing at all (not a blank line) when it is empty."""
    text = render(table, fmt)
    if text:
        click.echo(text)
