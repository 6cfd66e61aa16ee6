"""Which spans carry a reward, and its value: upstream's ``get_reward_value``, re-read.

Reward spans are few (about one per rollout), so this runs per span in
Python over the handful of candidates a vectorised filter found; it avoids
importing agentlightning (seconds of LiteLLM start-up) for three small rules:

1. v0.3 emitter: any key starting with ``agentlightning.reward``; the
   attributes under ``agentlightning.reward.`` unflatten to a list of
   ``{name, value}`` and the first is the primary reward.
2. AgentOps: ``agentops.task.output`` then ``agentops.entity.output``, a dict or
   JSON text ``{"type": "reward", "value": v}``; ``value`` None means no reward.
3. v0.2: an ``agentlightning.annotation`` span with a ``reward`` attribute.

Where upstream would crash (a malformed v0.3 payload) or hand back a value
that is not a usable number (a string, NaN, inf, or beyond ``finite.REWARD_LIMIT``, where a
margin or a mean would overflow), the span is rejected with a reason instead of becoming a reward.
"""

from __future__ import annotations

import json
from typing import Any

from tracebank.warehouse import finite
from tracebank.warehouse.contract import ANNOTATION_SPAN as ANNOTATION
from tracebank.warehouse.contract import REWARD_PREFIX

AGENTOPS_KEYS = ("agentops.task.output", "agentops.entity.output")

MALFORMED = "malformed_reward"
NON_NUMERIC = "non_numeric_reward"
NON_FINITE = "non_finite_reward"
BEYOND_RANGE = "reward_beyond_range"


class _NotAReward(Exception):
    pass


def _unflatten(flat: dict[str, Any]) -> Any:
    """upstream's unflatten_attributes: dotted keys to dicts, 0..n-1 keyed dicts to lists."""
    root: dict[str, Any] = {}
    for key, value in flat.items():
        parts = key.split(".")
        node = root
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[parts[-1]] = value

    def convert(node: Any) -> Any:
        if isinstance(node, dict):
            for k in list(node):
                node[k] = convert(node[k])
            if node and all(k.isdigit() for k in node):
                idx = sorted(int(k) for k in node)
                if idx == list(range(len(idx))):
                    return [node[str(i)] for i in range(len(idx))]
        return node

    return convert(root)


def _lax_float(value: Any) -> float:
    """pydantic's lax ``float`` (what RewardPydanticModel accepts)."""
    if isinstance(value, bool | int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            raise _NotAReward from None
    raise _NotAReward


def _v03(attrs: dict[str, Any]) -> tuple[str, Any] | None:
    if not any(k.startswith(REWARD_PREFIX) for k in attrs):
        return None
    if REWARD_PREFIX in attrs:
        raise ValueError(MALFORMED)
    nested = _unflatten(
        {k[len(REWARD_PREFIX) + 1 :]: v for k, v in attrs.items() if k.startswith(REWARD_PREFIX + ".")}
    )
    if not isinstance(nested, list):
        raise ValueError(MALFORMED)
    if not nested:
        return None
    try:
        dims = [(d["name"], _lax_float(d["value"])) for d in nested]
    except (KeyError, TypeError, _NotAReward):
        raise ValueError(MALFORMED) from None
    if not all(isinstance(name, str) for name, _ in dims):
        raise ValueError(MALFORMED)
    return str(dims[0][0]), dims[0][1]


def reward_of(name: str | None, attrs: dict[str, Any]) -> tuple[Any, str, str | None] | None:
    """None if the span is no reward; else (value, source, dimension name).

    Raises ValueError(reason) when upstream would treat the span as a reward
    but its value is unusable. ``value`` is whatever the span holds; see
    :func:`checked_value`.
    """
    found = _v03(attrs)
    if found is not None:
        return found[1], "agentlightning", found[0]
    for key in AGENTOPS_KEYS:
        output = attrs.get(key)
        payload: Any = None
        if output:
            if isinstance(output, dict):
                payload = output
            elif isinstance(output, str):
                try:
                    payload = json.loads(output)
                except ValueError:
                    payload = None
        if payload and isinstance(payload, dict) and payload.get("type") == "reward":
            value = payload.get("value")
            if value is None:
                return None
            return value, "agentops", None
    if name == ANNOTATION and attrs:
        value = attrs.get("reward")
        if value is None:
            return None
        return value, "agentlightning_v02", "reward"
    return None


def checked_value(value: Any) -> float:
    """``value`` as a usable reward (finite, within ``finite.REWARD_LIMIT``), else ValueError(reason)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int):
        if abs(value) > finite.REWARD_LIMIT:  # also an int too large for a float
            raise ValueError(BEYOND_RANGE)
        return float(value)
    if not isinstance(value, float):
        raise ValueError(NON_NUMERIC)
    problem = finite.reward_problem(value)
    if problem is not None:
        raise ValueError(BEYOND_RANGE if problem == finite.BEYOND_RANGE else NON_FINITE)
    return value


def classify(
    name: str | None, attributes_json: str | None
) -> tuple[float | None, str, str | None, str | None] | None:
    """(value, source, dimension name, reject reason) of one span, or None when it is no reward."""
    try:
        attrs = json.loads(attributes_json) if attributes_json else {}
    except ValueError:
        return None
    if not isinstance(attrs, dict):
        return None
    try:
        found = reward_of(name, attrs)
    except ValueError as exc:
        return None, "agentlightning", None, str(exc)
    if found is None:
        return None
    value, source, dim = found
    try:
        return checked_value(value), source, dim, None
    except ValueError as exc:
        return (float(value) if isinstance(value, float) else None), source, dim, str(exc)
