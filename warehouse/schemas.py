"""Arrow schemas of every warehouse table, built from :mod:`columns` (the one list of names and
types). Writers cast to these schemas so every file of a table has the same types."""

from __future__ import annotations

import pyarrow as pa
from tracebank.warehouse import columns
from tracebank.warehouse.columns import Columns

_SCALARS = {
    "string": pa.string(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float64": pa.float64(),
    "bool": pa.bool_(),
}


def arrow_type(notation: str) -> pa.DataType:
    """The Arrow type of a column type written in :mod:`columns`' notation."""
    if notation.startswith("list<") and notation.endswith(">"):
        return pa.list_(arrow_type(notation[5:-1]))
    return _SCALARS[notation]


def arrow_schema(cols: Columns) -> pa.Schema:
    return pa.schema([(name, arrow_type(notation)) for name, notation in cols])


TOKENS = arrow_type("list<int32>")
ROLLOUTS = arrow_schema(columns.ROLLOUTS)
ATTEMPTS = arrow_schema(columns.ATTEMPTS)
SPANS = arrow_schema(columns.SPANS)
EVENTS = arrow_schema(columns.EVENTS)
LLM_CALLS = arrow_schema(columns.LLM_CALLS)
REWARDS = arrow_schema(columns.REWARDS)
MESSAGES = arrow_schema(columns.MESSAGES)
DATASET_ROWS = arrow_schema(columns.DATASET_ROWS)
PREFERENCE_ROWS = arrow_schema(columns.PREFERENCE_ROWS)
REWARD_SCORES = arrow_schema(columns.REWARD_SCORES)
MERGE_DIAGNOSTICS = arrow_schema(columns.MERGE_DIAGNOSTICS)

BRONZE = {"rollouts": ROLLOUTS, "attempts": ATTEMPTS, "spans": SPANS, "events": EVENTS}
SILVER = {"llm_calls": LLM_CALLS, "rewards": REWARDS, "messages": MESSAGES}


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Reorder and cast ``table``'s columns to ``schema`` (extra columns are kept last)."""
    cols = []
    for field in schema:
        if field.name in table.column_names:
            cols.append(table.column(field.name).cast(field.type))
        else:
            cols.append(pa.nulls(table.num_rows, field.type))
    extra = [n for n in table.column_names if n not in schema.names]
    names = schema.names + extra
    return pa.Table.from_arrays(cols + [table.column(n) for n in extra], names=names)
