"""The agent of each 0.3 call: the name of the agent span that encloses it, as upstream names it.

Agent Lightning 0.3's ``TracerTraceToTriplet`` (``agent_match``) builds each attempt's span tree
from ``span_id`` / ``parent_id`` and gives every LLM call the name of its nearest enclosing span
that has an agent name (``TraceTree.agent_name``: ``agent.name``; ``operation.name`` when
``agentops.span.kind`` is ``agent``; ``recipient_agent_type``; ``langchain.chain.type``;
``executor.id``; ``agentlightning.operation.input.name`` when ``type`` is ``agent``; ``lc_name``
under a ``langchain.Chain.*`` span name; first present wins). A call with no such ancestor has
no agent (null). Upstream's time-based ``repair_hierarchy`` (re-parenting spans that float at
the root) is not reproduced: the recorded parent links are the tree.

Names are record text: they are stored as recorded and made terminal-safe where printed.
"""

from __future__ import annotations

from collections.abc import Iterable

import duckdb
import pyarrow as pa

# Keys upstream reads, in the order of the s[]/ty[] lists below.
_KEYS = (
    "agent.name",  # [1]
    "agentops.span.kind",  # [2]
    "operation.name",  # [3]
    "recipient_agent_type",  # [4]
    "langchain.chain.type",  # [5]
    "executor.id",  # [6]
    "type",  # [7]
    "agentlightning.operation.input.name",  # [8]
    "lc_name",  # [9]
)
_PATHS = ", ".join("'$.\"" + k + "\"'" for k in _KEYS)


def _present(k: int) -> str:
    """SQL: upstream's ``attributes.get(key) is not None`` (a JSON null is None)."""
    return f"(ty[{k}] IS NOT NULL AND ty[{k}] <> 'NULL')"


def _is(k: int, value: str) -> str:
    return f"(ty[{k}] = 'VARCHAR' AND s[{k}] = '{value}')"


# upstream's cases in order; a non-string value is taken as its JSON text
_NAME = f"""CASE
  WHEN {_present(1)} THEN s[1]
  WHEN {_is(2, "agent")} AND {_present(3)} THEN s[3]
  WHEN {_present(4)} THEN s[4]
  WHEN {_present(5)} THEN s[5]
  WHEN {_present(6)} THEN s[6]
  WHEN {_is(7, "agent")} AND {_present(8)} THEN s[8]
  WHEN starts_with(name, 'langchain.Chain.') AND {_present(9)} THEN s[9]
END"""

_LINKS_SQL = f"""
SELECT rollout_id, attempt_id, span_id, parent_id, {_NAME} AS agent
FROM (SELECT *, json_extract_string(a, [{_PATHS}]) AS s, json_type(a, [{_PATHS}]) AS ty
      FROM (SELECT *, CASE WHEN json_valid(attributes) THEN attributes END AS a FROM _link_batch))
"""

#: (rollout_id, attempt_id, span_id) -> (parent span_id or None, the span's own agent name or None)
Links = dict[tuple[str, str, str], tuple[str | None, str | None]]

# Columns of the bronze spans table read for the tree.
LINK_COLUMNS = ["rollout_id", "attempt_id", "span_id", "parent_id", "name", "attributes"]


def add_links(links: Links, spans: pa.Table, con: duckdb.DuckDBPyConnection) -> None:
    """Record the parent and own agent name of each span of ``spans`` (LINK_COLUMNS); a span id
    seen again replaces the earlier one, as upstream's id-to-span map does."""
    con.register("_link_batch", spans.select(LINK_COLUMNS))
    try:
        rows = con.sql(_LINKS_SQL).fetchall()
    finally:
        con.unregister("_link_batch")
    for rollout_id, attempt_id, span_id, parent_id, agent in rows:
        links[(rollout_id, attempt_id, span_id)] = (parent_id, agent)


def enclosing_agent(links: Links, rollout_id: str, attempt_id: str, span_id: str) -> str | None:
    """The agent name of the nearest strict ancestor of a span that has one (None: no agent).

    Hostile parent links may loop: each span is visited once."""
    seen = {span_id}
    parent = links.get((rollout_id, attempt_id, span_id), (None, None))[0]
    while parent is not None and parent not in seen:
        seen.add(parent)
        parent_id, agent = links.get((rollout_id, attempt_id, parent), (None, None))
        if agent is not None:
            return agent
        parent = parent_id
    return None


def agents_of(links: Links, calls: Iterable[tuple[str, str, str]]) -> pa.Array:
    """The enclosing agent of each (rollout_id, attempt_id, span_id) call, as a string array."""
    return pa.array([enclosing_agent(links, *call) for call in calls], type=pa.string())
