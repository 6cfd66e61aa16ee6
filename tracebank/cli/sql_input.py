"""Where `tracebank sql` takes its statement from, and its ``--param`` values."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tracebank.core.errors import UsageError


def read_statement(statement: str | None, file: str | None) -> str:
    """The SQL text: the argument, else ``--file PATH`` (``-`` or no argument at all: stdin)."""
    if statement is not None and file is not None:
        raise UsageError("give the statement or --file, not both")
    if statement is not None and statement != "-":
        return statement
    if file is not None and file != "-":
        path = Path(file)
        try:
            return path.read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror}", "pass a readable SQL file") from exc
    if sys.stdin is None or sys.stdin.isatty():
        raise UsageError(
            "no SQL statement", 'pass one, e.g. `tracebank sql "SELECT * FROM datasets"`, or pipe it in'
        )
    return sys.stdin.read()


def _value(text: str) -> Any:
    """A parameter's value: a JSON number, true/false/null, else the text itself."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if value is None or isinstance(value, bool | int | float) else text


def parse_params(pairs: tuple[str, ...]) -> dict[str, Any] | None:
    """``NAME=VALUE`` pairs as DuckDB named parameters (``$NAME`` in the statement)."""
    if not pairs:
        return None
    out: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.isidentifier():
            raise UsageError(f"invalid --param {pair!r}", "use NAME=VALUE and $NAME in the statement")
        out[name] = _value(value)
    return out
