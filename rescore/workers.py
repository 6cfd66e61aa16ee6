"""Running a scorer over records in worker processes: a score or the first line of a failure each."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from tracebank.rescore.record import ScoredRollout
from tracebank.rescore.scorer import load_scorer
from tracebank.warehouse import finite

#: The scorer each worker process loaded (by its reference), so a chunk does not load it again.
_LOADED: dict[str, Callable[[Any], Any]] = {}


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def score_one(scorer: Callable[[Any], Any], record: ScoredRollout) -> tuple[float | None, str | None]:
    """(score, None), (None, None) when the scorer returned None, or (None, first line of the failure)."""
    try:
        value = scorer(record)
    except Exception as exc:
        return None, first_line(exc)
    if value is None:
        return None, None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None, f"TypeError: the scorer returned {type(value).__name__}, not a float or None"
    try:
        number = float(value)
    except OverflowError:  # an int beyond float range
        number = math.inf if value > 0 else -math.inf
    if finite.reward_problem(number) is not None:  # NaN, inf, or so large a margin would overflow
        limit = f"±{finite.REWARD_LIMIT:g}"
        return None, f"ValueError: the scorer returned {number:g}, not a number within {limit}"
    return number, None


def score_chunk(scorer: str, records: list[dict[str, Any]]) -> list[tuple[float | None, str | None]]:
    """Score plain-data records in this (worker) process."""
    function = _LOADED.get(scorer)
    if function is None:
        function = _LOADED[scorer] = load_scorer(scorer)
    return [score_one(function, ScoredRollout(**r)) for r in records]
