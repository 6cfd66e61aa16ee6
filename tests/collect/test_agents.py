"""Agent names of calls: hostile parent links (loops, dangling parents) and 1.0's tag-or-model rule."""

from __future__ import annotations

import duckdb
import pyarrow as pa
from tracebank.collect.agents import LINK_COLUMNS, add_links, enclosing_agent
from tracebank.collect.agl1_silver import agent_of


def _links(rows):
    links: dict = {}
    table = pa.table({c: [r[i] for r in rows] for i, c in enumerate(LINK_COLUMNS)})
    add_links(links, table, duckdb.connect())
    return links


def test_a_parent_loop_ends_with_no_agent_instead_of_spinning():
    links = _links(
        [
            ("r", "a", "call", "x", "litellm_request", "{}"),
            ("r", "a", "x", "y", "s", "{}"),
            ("r", "a", "y", "x", "s", "{}"),
        ]
    )
    assert enclosing_agent(links, "r", "a", "call") is None


def test_upstream_cases_in_order_and_bad_json_names_nothing():
    links = _links(
        [
            ("r", "a", "c1", "p1", "litellm_request", "{}"),
            ("r", "a", "p1", "p2", "s", '{"agentops.span.kind": "tool", "operation.name": "no"}'),
            ("r", "a", "p2", None, "s", '{"recipient_agent_type": "r2", "executor.id": "e"}'),
            ("r", "a", "c2", "p3", "litellm_request", "{}"),
            ("r", "a", "p3", "p4", "langchain.Chain.Agent", '{"lc_name": "lc"}'),
            ("r", "a", "p4", None, "s", "{not json"),
            ("r", "a", "c3", "p5", "litellm_request", "{}"),
            (
                "r",
                "a",
                "p5",
                None,
                "s",
                '{"agent.name": null, "type": "agent", "agentlightning.operation.input.name": "weave"}',
            ),
        ]
    )
    assert enclosing_agent(links, "r", "a", "c1") == "r2"
    assert enclosing_agent(links, "r", "a", "c2") == "lc"
    assert enclosing_agent(links, "r", "a", "c3") == "weave"
    assert enclosing_agent(links, "other", "a", "c1") is None  # trees are per attempt


def test_1_0_agent_is_the_tag_else_the_model_and_never_a_non_string():
    assert agent_of({"agent": "planner", "model": "m"}) == "planner"
    assert agent_of({"request": {"metadata": {"agent": "coder"}, "model": "m"}}) == "coder"
    assert agent_of({"agent": ["x"], "request": {"model": "m"}}) == "m"
    assert agent_of({"request": "junk"}) is None
