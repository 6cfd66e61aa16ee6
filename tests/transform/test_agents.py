"""transform --agent equals Agent Lightning 0.3's TracerTraceToTriplet(agent_match=...) on spans its own
tracer recorded (agents nested, named the ways upstream reads, one call outside any agent)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pyarrow.parquet as pq
import pytest
from tracebank.transform import TransformConfig, transform
from tracebank.transform.errors import EmptyDatasetError, TransformUsageError
from tracebank.warehouse.storage import Storage

from tests.fixtures.agent_spans import recorded_agent_spans
from tests.fixtures.bronze import commit_collection


@pytest.fixture(scope="module")
def spans():
    return recorded_agent_spans(n_rollouts=4, seed=5)


@pytest.fixture
def built(wh, spans):
    return wh, commit_collection(wh, spans)


def upstream_rows(spans: Sequence[Any], agent_match: str | None) -> Counter:
    """(input_ids, labels) of every triplet upstream's adapter finds, rollout by rollout."""
    import agentlightning as agl

    logging.getLogger("agentlightning").setLevel(logging.ERROR)
    adapter = agl.TracerTraceToTriplet(llm_call_match="litellm_request", agent_match=agent_match)
    rows: Counter = Counter()
    for rollout_id in sorted({s.rollout_id for s in spans}):
        for t in adapter.adapt([s for s in spans if s.rollout_id == rollout_id]):
            prompt, response = t.prompt["token_ids"], t.response["token_ids"]
            rows[(tuple(prompt + response), tuple([-100] * len(prompt) + response))] += 1
    return rows


def our_rows(result) -> Counter:
    table = pq.read_table(result.folder / "train.parquet")
    return Counter((tuple(r["input_ids"]), tuple(r["labels"])) for r in table.to_pylist())


@pytest.mark.parametrize("agent", [None, "planner", "coder", "^(planner|reviewer)$", "er$", "^$|view"])
def test_agent_rows_equal_upstream_agent_match(built, spans, agent):
    wh, _ = built
    expected = upstream_rows(spans, agent)
    assert sum(expected.values()) > 0
    result = transform(wh, TransformConfig(name="agents", agent=agent))
    assert our_rows(result) == expected


def test_nested_agent_is_not_its_encloser(built, spans):
    """coder's calls exclude those of the reviewer nested in it, as upstream's subtree marker does."""
    wh, _ = built
    coder = transform(wh, TransformConfig(name="coder", agent="^coder$"))
    assert sum(our_rows(coder).values()) == 2 * 4
    assert coder.record.counts["other_agents"] == 4 * 4


def test_a_regex_matching_no_agent_builds_nothing(built, spans):
    wh, _ = built
    assert upstream_rows(spans, "nobody") == Counter()
    with pytest.raises(EmptyDatasetError):
        transform(wh, TransformConfig(name="none", agent="nobody"))


def test_silver_names_each_call_by_its_enclosing_agent(built):
    wh, cid = built
    calls = Storage(wh).silver_table(cid, "llm_calls", ["response_id", "agent"]).to_pylist()
    by_suffix = Counter((r["response_id"].rsplit("-", 1)[1], r["agent"]) for r in calls)
    assert by_suffix == Counter(
        {("p1", "planner"): 4, ("p2", "planner"): 4, ("c1", "coder"): 4, ("c2", "coder"): 4}
        | {("r1", "reviewer"): 4, ("none", None): 4}
    )


def test_a_bad_regex_is_a_one_line_usage_error():
    with pytest.raises(TransformUsageError, match="--agent is not a regular expression") as info:
        TransformConfig(name="x", agent="(unclosed").validate()
    assert "\n" not in str(info.value)


def test_agent_does_not_apply_to_agl1_rules():
    with pytest.raises(TransformUsageError, match="--rules agl1"):
        TransformConfig(name="x", agent="a", rules="agl1").validate()
