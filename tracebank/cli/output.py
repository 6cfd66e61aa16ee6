"""Rendering Arrow tables for the terminal: table, vertical, csv, json (one document) or jsonl.

Only the ``table`` and ``vertical`` layouts shorten long values (and say so) and show control
characters as visible symbols (trace text is hostile: an escape sequence in a value must not
reach the terminal); machine formats carry every value whole and exact, timestamps as ISO 8601.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from typing import Any

import click

from tracebank.cli.readable import Limits, Tabular, table_text, vertical_text
from tracebank.core.text import visible


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list | dict):
        text = json.dumps(value, default=str)
        return text if len(text) <= 60 else text[:57] + "..."
    return str(value)


def _table(table: Tabular, rows: list[dict[str, Any]]) -> str:
    cells = [[_cell(v) for v in r.values()] for r in rows]
    widths = [max([len(n)] + [len(c[i]) for c in cells]) for i, n in enumerate(table.column_names)]
    line = "  ".join(n.ljust(w) for n, w in zip(table.column_names, widths, strict=True))
    out = [line.rstrip(), "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out)


def _csv_value(value: Any) -> Any:
    if isinstance(value, list | dict):
        return json.dumps(value, default=_json_default)
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    return value


def _csv_line(values: list[Any]) -> str:
    """One CSV record. Written with CRLF as the terminator so that csv quotes a value holding a
    lone CR too (with "\n" it would not, and a reader would split the value there); the
    records are then joined with "\n" as before."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\r\n").writerow(values)
    return buf.getvalue().removesuffix("\r\n")


def _csv(table: Tabular, rows: list[dict[str, Any]]) -> str:
    lines = [_csv_line(table.column_names)]
    lines += [_csv_line([_csv_value(v) for v in r.values()]) for r in rows]
    return "\n".join(lines)


def _json_default(value: Any) -> str:
    """Timestamps as ISO 8601 (the one time format), anything else JSON lacks as its text."""
    return value.isoformat() if isinstance(value, dt.datetime | dt.date) else str(value)


def render(table: Tabular, fmt: str = "table", limits: Limits | None = None) -> str:
    """``table`` as an aligned text table, one ``column | value`` block per row (vertical), CSV,
    one JSON array (a row a line) or JSON lines.
    The table and vertical layouts show control characters (ESC, BEL, CR...) as visible symbols;
    the machine formats keep every value exact.

    With ``limits`` the table and vertical layouts show at most that many rows and cut long
    values, saying so (``tracebank sql``); machine formats always carry every value whole.
    An empty result is ``""`` in ``jsonl`` and ``[]`` in ``json`` (still one document).
    """
    if fmt == "vertical":
        return visible(vertical_text(table, limits or Limits(max_rows=0, max_width=0)))
    if fmt == "table" and limits is not None:
        return visible(table_text(table, limits))
    rows = table.to_pylist()
    if fmt == "jsonl":
        return "\n".join(json.dumps(r, default=_json_default) for r in rows)
    if fmt == "json":
        return "[" + ",\n ".join(json.dumps(r, default=_json_default) for r in rows) + "]"
    if fmt == "csv":
        return _csv(table, rows)
    return visible(_table(table, rows))


def echo_rows(table: Tabular, fmt: str = "table", limits: Limits | None = None) -> None:
    """Print ``render(table, fmt, limits)``; nothing at all (not a blank line) when it is empty."""
    text = render(table, fmt, limits)
    if text:
        # color=True: click would otherwise cut ANSI sequences out of values when stdout is not a
        # terminal, and machine formats keep values exact (the readable ones hold none by now).
        click.echo(text, color=True)


def say(text: str, err: bool = False) -> None:
    """Print a command's status lines (summaries, warnings, waits): they may quote what came from
    outside (a spool file's name, a claim holder read from a bucket, an id from a trace), so
    control characters are shown as visible symbols, as in every readable output."""
    click.echo(visible(text), err=err, color=True)
