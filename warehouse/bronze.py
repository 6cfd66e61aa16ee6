"""Bronze rows: store records (as plain dicts, e.g. pydantic ``model_dump()``) to Arrow.

Shared by collect (which writes them) and anything that needs to build a
collection from spans it already has (tests, imports). JSON-valued fields are
stored as JSON text so every key the store returned survives; readers parse
them back with ``json.loads``. The 0.3 tables' JSON has its keys sorted; an
``events`` row's ``data`` keeps its keys in the order they were recorded, since
that data is what a chat template renders (``tools | tojson`` of a tool's schema,
a call's arguments given as an object) and a reordered schema is another prompt.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa
from tracebank.warehouse import schemas


def to_json(value: Any, sort_keys: bool = True) -> str | None:
    """JSON text of ``value`` (None stays None); non-JSON values become strings. ``sort_keys``:
    False keeps every object's keys in their order (the ``events`` table's ``data``)."""
    if value is None:
        return None
    return json.dumps(value, sort_keys=sort_keys, default=str, allow_nan=True)


def _rows(
    records: Iterable[Mapping[str, Any]],
    schema: pa.Schema,
    collection_id: str,
    json_fields: set[str],
    sort_keys: bool = True,
) -> pa.Table:
    cols: dict[str, list[Any]] = {name: [] for name in schema.names}
    for rec in records:
        for name in schema.names:
            if name == "collection_id":
                cols[name].append(collection_id)
            elif name in json_fields:
                cols[name].append(to_json(rec.get(name), sort_keys))
            else:
                cols[name].append(rec.get(name))
    return pa.table({n: pa.array(v, type=schema.field(n).type) for n, v in cols.items()})


def spans_table(spans: Iterable[Mapping[str, Any]], collection_id: str) -> pa.Table:
    """Rows of the ``spans`` table from Span dicts (``Span.model_dump()``)."""
    return _rows(
        spans,
        schemas.SPANS,
        collection_id,
        {"status", "attributes", "events", "links", "context", "parent", "resource"},
    )


def rollouts_table(rollouts: Iterable[Mapping[str, Any]], collection_id: str) -> pa.Table:
    """Rows of the ``rollouts`` table from Rollout dicts (the nested attempt is dropped)."""
    return _rows(rollouts, schemas.ROLLOUTS, collection_id, {"input", "config", "metadata"})


def attempts_table(attempts: Iterable[Mapping[str, Any]], collection_id: str) -> pa.Table:
    """Rows of the ``attempts`` table from Attempt dicts."""
    return _rows(attempts, schemas.ATTEMPTS, collection_id, {"metadata"})


JSON_SPAN_FIELDS = ("status", "attributes", "events", "links", "context", "parent", "resource")


def span_dict_from_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """The Span dict a ``spans`` row was made from (JSON fields parsed back)."""
    out = {k: v for k, v in row.items() if k != "collection_id"}
    for key in JSON_SPAN_FIELDS:
        if out.get(key) is not None:
            out[key] = json.loads(out[key])
    return out


def events_table(events: Iterable[Mapping[str, Any]], collection_id: str) -> pa.Table:
    """Rows of the ``events`` table (Agent Lightning 1.0) from event dicts with a ``position``; each
    ``data`` keeps its keys in the order recorded (a tool schema reaches a chat template as written)."""
    return _rows(events, schemas.EVENTS, collection_id, {"data"}, sort_keys=False)
