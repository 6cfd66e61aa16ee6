"""What a spool entry must hold before collect reads it: field by field, with a one-line reason.

A spool folder is written by the trainer's hook, but any file can land there (a copy
by hand, a half-edited entry, another tool's output). Every field collect reads is
checked here against the type the bronze tables store, so a bad file is rejected
with its reason instead of failing the whole run with a traceback.
"""

from __future__ import annotations

from typing import Any

from tracebank.collect.agl1_hook import SPOOL_FORMAT

MAX_DEPTH = 64  # JSON nesting; a real entry is under 15 deep, and redaction walks it recursively


def nesting_depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """How deep ``value`` nests (stops counting past ``limit``); iterative, so any depth is safe."""
    deepest, stack = 0, [(value, 1)]
    while stack and deepest <= limit:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack += [(c, depth + 1) for c in children if isinstance(c, dict | list)]
    return deepest


def _is_time(value: Any) -> bool:
    """A timestamp the float64 columns can hold: a number (not a bool) or null."""
    if value is None:
        return True
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return isinstance(value, float) or abs(value) < 2**1023  # a larger int does not fit a float


def _text(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def _rollout_problem(rollout: Any) -> str | None:
    if not isinstance(rollout, dict):
        return "`rollout` is not an object"
    status = rollout.get("status")
    if status is not None and not isinstance(status, dict):
        return "`rollout.status` is not an object"
    for key in ("created_at", "updated_at"):
        if not _is_time((status or {}).get(key)):
            return f"`rollout.status.{key}` is not a number"
    if not isinstance(rollout.get("metadata") or {}, dict):
        return "`rollout.metadata` is not an object"
    return None


def _events_problem(events: Any) -> str | None:
    if not isinstance(events, list):
        return "the attempt's events are not a list"
    for i, event in enumerate(events):
        if not isinstance(event, dict):
            return f"event {i} is not an object"
        if not isinstance(event.get("event_type"), str | None):
            return f"event {i}: `event_type` is not a string"
        if not _is_time(event.get("timestamp")):
            return f"event {i}: `timestamp` is not a number ({str(event.get('timestamp'))[:40]!r})"
    return None


def entry_problem(data: Any) -> str | None:
    """Why ``data`` (a parsed spool file) is not a spool entry collect can commit; None when it is."""
    if not isinstance(data, dict) or data.get("format") != SPOOL_FORMAT:
        return f"not a {SPOOL_FORMAT} entry"
    if nesting_depth(data) > MAX_DEPTH:
        return f"nested deeper than {MAX_DEPTH} levels"
    for key in ("rollout_id", "attempt_id"):
        if not _text(data.get(key)):
            return f"`{key}` is missing or not a string"
    if not isinstance(data.get("state"), str | None):
        return "`state` is not a string"
    by_attempt = data.get("events_by_attempt", {})
    if not isinstance(by_attempt, dict):
        return "`events_by_attempt` is not an object"
    return _rollout_problem(data.get("rollout")) or _events_problem(by_attempt.get(data["attempt_id"], []))
