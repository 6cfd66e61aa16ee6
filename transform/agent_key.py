"""``--agent-key``: what names the agent of a 1.0 (or imported) call when ``--agent`` selects calls.

Silver's ``llm_calls.agent`` is the default (``tag``): the agent's own tag, else the request's model.
1.0 records no agent spans, but each ``model_request`` keeps the whole request, so a transform can
name a call's agent from it instead (silver ``messages`` and ``llm_calls.model``):

- ``model``: the request's model;
- ``system``: ``system:`` + the first 8 hex digits of the sha256 of the request's system text (its
  input messages of role ``system``, in order, their contents as silver holds them joined by a
  newline); a request without one has no agent;
- ``tools``: ``tools:`` + the request's tool function names, sorted, distinct, joined by ``,``
  (``tools:sha256-`` + 12 hex digits of that text when it is longer than 200 characters); a request
  without tools has no agent;
- ``MODULE:FUNCTION`` (or ``FILE.py:FUNCTION``): the user's function of the call's request,
  ``{"model", "messages", "tools"}`` (OpenAI format), returning a name or None.

0.3 span calls keep the name of their enclosing agent span whatever the key: their traces name
their agents. A call with no agent is never matched (as upstream's ``agent_match``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import polars as pl
import pyarrow as pa
from tracebank.core.user_code import load_function
from tracebank.transform.config import AGENT_KEYS, TAG
from tracebank.transform.errors import TransformError, TransformUsageError
from tracebank.transform.text_render import parse_json_list
from tracebank.warehouse.storage import Storage

KEYS = ["rollout_id", "attempt_id", "span_id"]
MAX_TOOLS_NAME = 200
#: The silver source whose calls a key re-names (imports are 1.0 events too); 0.3 spans have none.
REQUEST_SOURCE = "agl1"

Namer = Callable[[dict[str, Any]], Any]


@dataclass(frozen=True)
class AgentKey:
    """A ``--agent-key`` ready to name calls (the user's function loaded once)."""

    key: str = TAG
    function: Namer | None = None

    def named(self, storage: Storage, cid: str, calls: pa.Table) -> pa.Table:
        """``calls`` (collection ``cid``'s silver ``llm_calls``, in silver order) with ``agent`` named
        by the key on its 1.0 calls; the 0.3 span calls keep theirs."""
        if self.key == TAG:
            return calls
        ids = storage.silver_table(cid, "llm_calls", [*KEYS, "source", "model"])
        if ids.num_rows != calls.num_rows:
            raise TransformError("a silver cache changed while it was read", "run the transform again")
        frame = _frame(ids).with_row_index("row")
        requests = frame.filter(pl.col("source") == REQUEST_SOURCE)
        if self.key == "model":
            named = requests.select("row", pl.col("model").alias("keyed"))
        else:
            named = _named_from_messages(storage, cid, requests, self.key, self.function)
        old = _frame(calls.select(["agent"])).get_column("agent")
        agents = frame.select("row", "source").join(named, on="row", how="left").sort("row").with_columns(old)
        new = agents.select(
            pl.when(pl.col("source") == REQUEST_SOURCE).then("keyed").otherwise("agent").alias("agent")
        ).to_series()
        at = calls.schema.get_field_index("agent")
        return calls.set_column(at, "agent", new.to_arrow().cast(calls.schema.field(at).type))


def agent_key(key: str) -> AgentKey:
    """``key`` ready to use: a user's MODULE:FUNCTION is loaded here (a bad one is one usage line)."""
    if key in AGENT_KEYS:
        return AgentKey(key)
    return AgentKey(key, load_function(key, "agent key", "--agent-key", TransformUsageError))


def _named_from_messages(
    storage: Storage, cid: str, requests: pl.DataFrame, key: str, namer: Namer | None
) -> pl.DataFrame:
    """(row, keyed) of the 1.0 calls, their names from their request's messages."""
    columns = [*KEYS, "direction", "message_index", "role", "content", "tool_calls", "tool_call_id", "tools"]
    messages = (
        _frame(storage.silver_table(cid, "messages", columns))
        .filter(pl.col("direction") == "input")
        .join(requests.select(KEYS), on=KEYS, how="semi")
        .sort([*KEYS, "message_index"])
    )
    if key == "system":
        system = (
            messages.filter(pl.col("role") == "system")
            .group_by(KEYS, maintain_order=True)
            .agg(pl.col("content").fill_null("").str.join("\n").alias("text"))
        )
        return _by_value(requests, system, "text", system_name)
    if key == "tools":
        tools = messages.group_by(KEYS, maintain_order=True).agg(pl.col("tools").drop_nulls().first())
        return _by_value(requests, tools, "tools", lambda text: tools_name(parse_json_list(text)))
    assert namer is not None
    return _by_function(requests, messages, key, namer)


def _by_value(
    requests: pl.DataFrame, values: pl.DataFrame, column: str, name: Callable[[str], str | None]
) -> pl.DataFrame:
    """(row, keyed): each distinct value named once (a collection's agents share a few prompts)."""
    joined = requests.select("row", *KEYS).join(values, on=KEYS, how="left")
    distinct = joined.get_column(column).drop_nulls().unique().to_list()
    names = {value: name(value) for value in distinct}
    keyed = [None if v is None else names[v] for v in joined.get_column(column).to_list()]
    return pl.DataFrame({"row": joined.get_column("row"), "keyed": pl.Series(keyed, dtype=pl.String)})


def _by_function(requests: pl.DataFrame, messages: pl.DataFrame, key: str, namer: Namer) -> pl.DataFrame:
    """(row, keyed): the user's function of each call's request."""
    per_call = messages.group_by(KEYS, maintain_order=True).agg(
        pl.struct("role", "content", "tool_calls", "tool_call_id").alias("messages"),
        pl.col("tools").drop_nulls().first(),
    )
    joined = requests.select("row", "model", *KEYS).join(per_call, on=KEYS, how="left")
    keyed = []
    for span_id, model, listed, tools in joined.select("span_id", "model", "messages", "tools").iter_rows():
        chat = [_message(m) for m in listed or []]
        request = {"model": model, "messages": chat, "tools": parse_json_list(tools)}
        keyed.append(_call_user(namer, key, request, span_id))
    return pl.DataFrame({"row": joined.get_column("row"), "keyed": pl.Series(keyed, dtype=pl.String)})


def _call_user(namer: Namer, key: str, request: dict[str, Any], span_id: str) -> str | None:
    try:
        name = namer(request)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise TransformError(
            f"--agent-key {key} raised {type(exc).__name__}: {first} (call {span_id[:80]!r})",
            "fix the function; it is given each 1.0 call's request: model, messages, tools",
        ) from None
    if name is not None and not isinstance(name, str):
        raise TransformError(
            f"--agent-key {key} returned a {type(name).__name__} for call {span_id[:80]!r}",
            "return the agent's name (a str) or None",
        )
    return name


def _message(row: dict[str, Any]) -> dict[str, Any]:
    """One OpenAI-format message from a silver ``messages`` row (its JSON fields parsed)."""
    out: dict[str, Any] = {"role": row["role"], "content": row["content"]}
    if row["tool_calls"] is not None:
        out["tool_calls"] = parse_json_list(row["tool_calls"])
    if row["tool_call_id"] is not None:
        out["tool_call_id"] = row["tool_call_id"]
    return out


def system_name(text: str) -> str:
    """``system:`` + the first 8 hex digits of the sha256 of the system text (UTF-8)."""
    return "system:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def tools_name(tools: list[Any] | None) -> str | None:
    """``tools:`` + the sorted distinct function names joined by ``,`` (hashed when long); None: none."""
    names = set()
    for tool in tools or []:
        if not isinstance(tool, dict):
            continue
        function = tool.get("function")
        name = function.get("name") if isinstance(function, dict) else tool.get("name")
        if isinstance(name, str):
            names.add(name)
    if not names:
        return None
    joined = ",".join(sorted(names))
    if len(joined) > MAX_TOOLS_NAME:
        return "tools:sha256-" + hashlib.sha256(joined.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return "tools:" + joined


def _frame(table: pa.Table) -> pl.DataFrame:
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame
