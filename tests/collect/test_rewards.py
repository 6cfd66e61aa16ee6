"""Reward spans are read as upstream's get_reward_value reads them; bad values get a reason."""

import json
import math

import pytest
from tracebank.collect.rewards import classify

from tests.fixtures.proxy_spans import plain_span

GOOD = [
    (
        "agentlightning.annotation",
        {"agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": 0.5},
    ),
    (
        "agentlightning.annotation",
        {
            "agentlightning.reward.0.name": "task",
            "agentlightning.reward.0.value": 1,
            "agentlightning.reward.1.name": "speed",
            "agentlightning.reward.1.value": 0.1,
        },
    ),
    (
        "agentlightning.annotation",
        {"agentlightning.reward.0.name": "p", "agentlightning.reward.0.value": "0.25"},
    ),
    ("agentops.task", {"agentops.task.output": json.dumps({"type": "reward", "value": 0.75})}),
    ("agentops.op", {"agentops.entity.output": json.dumps({"type": "reward", "value": 2})}),
    (
        "agentops.op",
        {
            "agentops.task.output": json.dumps({"type": "other"}),
            "agentops.entity.output": json.dumps({"type": "reward", "value": 0.3}),
        },
    ),
    ("agentlightning.annotation", {"reward": 0.9}),
]
NOT_REWARDS = [
    ("litellm_request", {"gen_ai.response.id": "x"}),
    ("agentops.task", {"agentops.task.output": json.dumps({"type": "reward", "value": None})}),
    ("agentops.task", {"agentops.task.output": "not json"}),
    ("agentops.task", {"agentops.task.output": ""}),
    ("agentlightning.annotation", {"other": 1}),
    ("some.span", {"reward": 0.9}),
]


@pytest.mark.parametrize(("name", "attrs"), GOOD + NOT_REWARDS)
def test_agrees_with_upstream(name, attrs):
    from agentlightning.emitter.reward import get_reward_value

    span = plain_span("r", "a", 1, name, attrs, 1.0)
    expected = get_reward_value(span)
    got = classify(name, json.dumps(span.attributes))
    if expected is None:
        assert got is None
    else:
        assert got is not None and got[3] is None
        assert got[0] == pytest.approx(float(expected))


@pytest.mark.parametrize(
    ("attrs", "reason"),
    [
        (
            {"agentlightning.reward.0.name": "p", "agentlightning.reward.0.value": float("nan")},
            "non_finite_reward",
        ),
        (
            {"agentlightning.reward.0.name": "p", "agentlightning.reward.0.value": float("inf")},
            "non_finite_reward",
        ),
        ({"agentlightning.reward.0.value": 1.0}, "malformed_reward"),
        ({"agentlightning.reward.0.name": "p", "agentlightning.reward.0.value": "high"}, "malformed_reward"),
        ({"agentops.task.output": json.dumps({"type": "reward", "value": "good"})}, "non_numeric_reward"),
        (
            {"agentops.task.output": json.dumps({"type": "reward", "value": float("nan")})},
            "non_finite_reward",
        ),
    ],
)
def test_bad_values_are_rejected_with_a_reason(attrs, reason):
    got = classify("agentlightning.annotation", json.dumps(attrs))
    assert got is not None and got[3] == reason
    assert got[0] is None or not math.isfinite(got[0])


@pytest.mark.parametrize("value", [1e101, -1e308, 10**400], ids=["1e101", "-1e308", "10**400"])
def test_a_reward_beyond_the_bound_is_rejected_with_its_reason(value):
    """A reward so large that a margin or a mean of rewards would overflow is not a reward."""
    attrs = {"agentops.task.output": json.dumps({"type": "reward", "value": value})}
    got = classify("agentlightning.annotation", json.dumps(attrs))
    assert got is not None and got[3] == "reward_beyond_range"
