"""Finite numbers and standard JSON: the one owner of how tracebank checks, writes and reads numbers.

Rewards come from agents, scorers and shared warehouses (hostile), so a reward is usable only
when it is a finite float of magnitude at most :data:`REWARD_LIMIT`. The bound is far beyond any
real reward and far below float64's range: the difference of two rewards (a preference margin),
a square (a variance) and a sum over any number of rows stay finite, so no statistic overflows.

JSON that tracebank writes into a warehouse or an export is standard JSON: ``NaN`` and
``Infinity`` are not JSON, and a reader other than Python's (the report's page script, jq,
DuckDB) refuses them. :func:`dumps` refuses a non-finite number, naming where it is;
:func:`loads` refuses ``NaN``, ``Infinity``, ``-Infinity`` and numbers that overflow to them;
:func:`nulled` turns them into null where a value is only shown (the report); :func:`json_line`
is one JSON value on one line for line splitters (U+2028 and U+2029 escaped too).

Standard library only: every stage and the warehouse's upper layers use it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

#: The largest magnitude a reward or a layer's score may have (see the module docstring).
REWARD_LIMIT = 1e100

#: Why a reward is refused, as counted in manifests.
NAN, INF, BEYOND_RANGE = "nan", "inf", "beyond_range"


class NotStandardJSON(ValueError):
    """A value that standard JSON cannot hold (a non-finite number), or text that is not standard JSON."""


def reward_problem(value: float) -> str | None:
    """None for a usable reward; else why not (:data:`NAN`, :data:`INF` or :data:`BEYOND_RANGE`)."""
    if math.isnan(value):
        return NAN
    if math.isinf(value):
        return INF
    if abs(value) > REWARD_LIMIT:
        return BEYOND_RANGE
    return None


def non_finite(value: Any, where: str = "") -> Iterator[tuple[str, float]]:
    """(dotted path, value) of every non-finite float inside ``value``, in order."""
    if isinstance(value, float):
        if not math.isfinite(value):
            yield where or "value", value
        return
    if isinstance(value, dict):
        items: Any = ((f"{where}.{k}" if where else str(k), v) for k, v in value.items())
    elif isinstance(value, list | tuple):
        items = ((f"{where}[{i}]", v) for i, v in enumerate(value))
    else:
        return
    for path, item in items:
        yield from non_finite(item, path)


def first_non_finite(value: Any, where: str = "") -> tuple[str, float] | None:
    """(dotted path, value) of the first non-finite float inside ``value``, or None."""
    return next(non_finite(value, where), None)


def dumps(value: Any, **options: Any) -> str:
    """``json.dumps`` that refuses a non-finite number with NotStandardJSON naming where it is."""
    found = first_non_finite(value)
    if found is not None:
        path, number = found
        raise NotStandardJSON(f"{path} is {number}, not a finite number")
    return json.dumps(value, allow_nan=False, **options)


def _refuse_constant(name: str) -> Any:
    raise NotStandardJSON(f"it holds {name}, which is not standard JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 parses to inf without passing through parse_constant
        raise NotStandardJSON(f"it holds the number {text[:40]}, beyond float range")
    return value


def loads(data: str | bytes) -> Any:
    """Parse standard JSON only; NotStandardJSON (a ValueError) for NaN, Infinity or an overflowing number."""
    return json.loads(data, parse_constant=_refuse_constant, parse_float=_finite_float)


def nulled(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None (for data that is only shown)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: nulled(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [nulled(v) for v in value]
    return value


#: JSON allows U+2028 / U+2029 raw in strings, but line splitters (JavaScript's, Python's
#: str.splitlines) end a line there: escaped, a JSON line is one line for every reader.
_LINE_SAFE = str.maketrans({"\u2028": "\\u2028", "\u2029": "\\u2029"})


def json_line(value: Any, **options: Any) -> str:
    """``value`` as one line of standard JSON (see :func:`dumps`), safe for any line splitter."""
    return dumps(value, **options).translate(_LINE_SAFE)
