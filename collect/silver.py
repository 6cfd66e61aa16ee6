"""Silver tables of one collection: llm_calls, rewards, messages (cached, rebuilt when missing).

Everything is derived column-at-a-time from the bronze ``spans`` table:
DuckDB reads each span's attribute JSON once and pulls out the keys below;
token-id strings are parsed in bulk (``collect.tokens``); the response ids
that vLLM >= 0.10.2 keeps only inside the ``choices`` Python repr are found
with one regular expression that steps over quoted strings, so text inside a
message can never be mistaken for them.

The cache lives in ``silver/<collection_id>/`` and is committed like every
other folder (files first, manifest last). Collections are immutable, so a
committed cache is reused until its ``silver_version`` changes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
from tracebank.collect import rewards as reward_rules
from tracebank.collect.agents import LINK_COLUMNS, Links, add_links, agents_of
from tracebank.collect.agl1_silver import silver_from_events
from tracebank.collect.errors import UnknownCollectionError
from tracebank.collect.tokens import MISSING, parse_prompt_lists, parse_token_lists
from tracebank.core.arrowutil import arrow_ints, repeat_string, string_scalar
from tracebank.warehouse import schemas
from tracebank.warehouse.contract import (
    ANNOTATION_SPAN,
    ENGINE,
    LITELLM_SPAN,
    RAW_LLM_SPAN,
    REWARD_PREFIX,
    SILVER_VERSION,
    TEXT,
)
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.records import FileEntry, SilverManifest
from tracebank.warehouse.storage import Storage, iter_batches, read_table

SPAN_COLUMNS = ["rollout_id", "attempt_id", "sequence_id", "span_id", "name", "start_time", "attributes"]

# Keys read from each call span's attributes, in the order of the s[]/ty[] lists below.
_KEYS = (
    "llm.hosted_vllm.prompt_token_ids",  # [1]
    "llm.hosted_vllm.response_token_ids",  # [2] old `agl vllm` patch: [[...]]
    "llm.hosted_vllm.choices",  # [3] vLLM >= 0.10.2: ids inside choices[0]
    "prompt_token_ids",  # [4] ids on litellm_request
    "response_token_ids",  # [5]
    "gen_ai.response.id",  # [6]
    "llm.hosted_vllm.id",  # [7]
    "gen_ai.request.model",  # [8]
    "llm.hosted_vllm.model",  # [9]
    "gen_ai.response.model",  # [10]
)
_PATHS = ", ".join("'$.\"" + k + "\"'" for k in _KEYS)

# Each key is read as text (``s[k]``: strings unquoted, anything else its JSON text, JSON
# null and a missing key NULL) plus its JSON type (``ty[k]``: NULL when missing).
# json_extract would re-serialise every (large) token-list string as JSON, which costs
# about four times the parse itself.


def _text(k: int) -> str:
    """SQL: a value as the text upstream would literal_eval (strings unquoted)."""
    return f"s[{k}]"


def _str(k: int) -> str:
    return f"CASE WHEN ty[{k}] = 'VARCHAR' THEN s[{k}] END"


def _truthy(k: int) -> str:
    return (
        f"(ty[{k}] IS NOT NULL AND ty[{k}] <> 'NULL' AND NOT CASE WHEN ty[{k}] = 'VARCHAR' "
        f"THEN s[{k}] = '' ELSE s[{k}] IN ('false', '0', '0.0', '[]', '{{}}') END)"
    )


# The response id as upstream reads it: `gen_ai.response.id or llm.hosted_vllm.id`, kept
# only when that value is a non-empty string.
_RESPONSE_ID = f"CASE WHEN {_truthy(6)} THEN {_str(6)} WHEN {_truthy(7)} THEN {_str(7)} END"

_CALLS_SQL = f"""
WITH c AS (
  SELECT span_index, rollout_id, attempt_id, span_id, name, sequence_id, start_time,
         json_extract_string(attributes, [{_PATHS}]) AS s, json_type(attributes, [{_PATHS}]) AS ty
  FROM spans WHERE name IN ('{RAW_LLM_SPAN}', '{LITELLM_SPAN}') {{valid}}
), t AS (
  SELECT span_index, rollout_id, attempt_id, span_id, name AS span_name, sequence_id, start_time,
         {_RESPONSE_ID} AS response_id,
         coalesce({_str(8)}, {_str(9)}, {_str(10)}) AS model,
         CASE WHEN name = '{RAW_LLM_SPAN}' THEN {_text(1)} ELSE {_text(4)} END AS prompt_text,
         CASE WHEN name = '{RAW_LLM_SPAN}'
              THEN nullif(regexp_extract({_text(2)}, '^\\s*\\[\\s*(\\[[^\\[\\]]*\\])', 1), '') END
           AS old_text,
         CASE WHEN name = '{RAW_LLM_SPAN}' THEN {_text(3)} END AS choices_text,
         CASE WHEN name = '{LITELLM_SPAN}' THEN {_text(5)} END AS litellm_response_text
  FROM c
  WHERE name = '{RAW_LLM_SPAN}' OR ty[4] IS NOT NULL OR ty[5] IS NOT NULL
)
SELECT * FROM t
ORDER BY span_index
"""

# From the start of the choices repr, step over whole string literals ('...' or "...",
# with escapes) until the first `'token_ids': [` key; its list is the first choice's
# response ids. A quote inside a message can never start a false match.
_CHOICE_IDS_RE = (
    r"""(?s)^(?:[^'"]+|'(?:[^'\\]+|\\.)*'|"(?:[^"\\]+|\\.)*")*?"""
    r"""(?:'token_ids'|"token_ids")\s*:\s*(\[[^\]]*\])"""
)

_REWARD_CANDIDATES_SQL = f"""
SELECT span_index, rollout_id, attempt_id, span_id, name, sequence_id, start_time, attributes
FROM spans
WHERE name = '{ANNOTATION_SPAN}' OR contains(attributes, '{REWARD_PREFIX}')
   OR contains(attributes, 'agentops.task.output') OR contains(attributes, 'agentops.entity.output')
ORDER BY span_index
"""

# One row per chat message of each litellm_request span. LiteLLM 1.108 records OpenAI-style
# fields beside the GenAI parts (``tool_calls`` / ``tool_call_id`` on the message); the
# GenAI semantic conventions' own ``tool_call`` / ``tool_call_response`` parts are read too.
# ``content`` holds the text (a tool result's response included, tool calls not);
# ``tool_calls`` is an OpenAI-format JSON list; ``tools`` the request's tool definitions
# (``llm.request.functions.N.*``) as an OpenAI-format JSON list, on every message of the call.
_MESSAGES_SQL = f"""
WITH s AS (
  SELECT span_index, rollout_id, attempt_id, span_id, sequence_id,
         json_extract_string(attributes, ['$."gen_ai.input.messages"', '$."gen_ai.output.messages"']) AS m
  FROM spans WHERE name = '{LITELLM_SPAN}' {{valid}}
), d AS (
  SELECT span_index, rollout_id, attempt_id, span_id, sequence_id, 'input' AS direction, m[1] AS doc FROM s
  UNION ALL
  SELECT span_index, rollout_id, attempt_id, span_id, sequence_id, 'output', m[2] FROM s
), arr AS (
  SELECT *, json_extract(doc, '$[*]') AS msgs FROM d
  WHERE doc IS NOT NULL AND json_valid(doc) AND json_type(doc) = 'ARRAY'
), u AS (
  SELECT span_index, rollout_id, attempt_id, span_id, sequence_id, direction,
         unnest(msgs) AS msg, unnest(range(len(msgs))) AS message_index
  FROM arr
), p AS (
  SELECT *, CASE WHEN json_type(msg, '$.parts') = 'ARRAY' THEN json_extract(msg, '$.parts[*]') END AS parts
  FROM u
), fn AS (
  SELECT span_index, attributes,
         CAST(regexp_extract(k, '^llm\\.request\\.functions\\.(\\d+)\\.name$', 1) AS INTEGER) AS idx
  FROM (SELECT span_index, attributes, unnest(json_keys(attributes)) AS k FROM spans
        WHERE name = '{LITELLM_SPAN}' AND contains(attributes, '"llm.request.functions.') {{valid}})
  WHERE regexp_matches(k, '^llm\\.request\\.functions\\.\\d+\\.name$')
), tools AS (
  SELECT span_index, CAST(to_json(list(json_object(
      'type', 'function', 'function', json_object(
        'name', json_extract_string(attributes, '$."' || key || '.name"'),
        'description', json_extract_string(attributes, '$."' || key || '.description"'),
        'parameters', json(json_extract_string(attributes, '$."' || key || '.parameters"'))))
      ORDER BY idx)) AS VARCHAR) AS tools
  FROM (SELECT *, 'llm.request.functions.' || idx AS key FROM fn) GROUP BY span_index
)
SELECT rollout_id, attempt_id, span_id, sequence_id, direction,
       CAST(message_index AS INTEGER) AS message_index,
       msg ->> 'role' AS role,
       CASE WHEN parts IS NOT NULL THEN
              nullif(array_to_string(list_filter(list_transform(parts, lambda x:
                CASE WHEN x ->> 'type' = 'text' THEN x ->> 'content'
                     WHEN x ->> 'type' = 'tool_call' THEN NULL
                     WHEN x ->> 'type' = 'tool_call_response' THEN
                       CASE WHEN json_type(x, '$.response') = 'VARCHAR' THEN x ->> 'response'
                            ELSE CAST(json_extract(x, '$.response') AS VARCHAR) END
                     ELSE CAST(x AS VARCHAR) END), lambda t: t IS NOT NULL), chr(10)), '')
            WHEN json_type(msg, '$.content') = 'VARCHAR' THEN msg ->> 'content'
            ELSE CAST(json_extract(msg, '$.content') AS VARCHAR) END AS content,
       CASE WHEN json_type(msg, '$.tool_calls') = 'ARRAY' AND json_array_length(msg, '$.tool_calls') > 0
              THEN CAST(json_extract(msg, '$.tool_calls') AS VARCHAR)
            WHEN len(list_filter(parts, lambda x: x ->> 'type' = 'tool_call')) > 0
              THEN CAST(to_json(list_transform(
                list_filter(parts, lambda x: x ->> 'type' = 'tool_call'), lambda x: json_object(
                  'id', x ->> 'id', 'type', 'function', 'function', json_object(
                    'name', x ->> 'name',
                    'arguments', CASE WHEN json_type(x, '$.arguments') = 'VARCHAR' THEN x ->> 'arguments'
                                      ELSE CAST(json_extract(x, '$.arguments') AS VARCHAR) END)))) AS VARCHAR)
       END AS tool_calls,
       coalesce(msg ->> 'tool_call_id',
                list_filter(parts, lambda x: x ->> 'type' = 'tool_call_response')[1] ->> 'id')
         AS tool_call_id,
       tools.tools
FROM p LEFT JOIN tools USING (span_index)
ORDER BY span_index, direction, message_index
"""


def span_files(wh: Warehouse, collection_id: str) -> list[Path]:
    """The committed bronze span files of a collection, in manifest order."""
    folder = wh.collection_dir(collection_id)
    storage = Storage(wh)
    manifest = storage.collection(collection_id)
    if manifest is None:
        raise UnknownCollectionError(
            f"collection {collection_id!r} is not committed in {wh.root}",
            'list them with `tracebank sql "SELECT * FROM collections"`',
        )
    return storage.files_of(folder, manifest, "spans")


_KEEP_SPANS = (
    f"name IN ('{RAW_LLM_SPAN}', '{LITELLM_SPAN}', '{ANNOTATION_SPAN}') "
    f"OR contains(attributes, '{REWARD_PREFIX}') OR contains(attributes, 'agentops.')"
)


def register_spans(con: duckdb.DuckDBPyConnection, spans: pa.Table) -> None:
    """Table ``spans`` from rows of SPAN_COLUMNS + ``span_index`` (their place in collection
    order), keeping only spans some silver table reads."""
    con.register("_spans_batch", spans)
    try:
        con.execute(f"CREATE OR REPLACE TEMP TABLE spans AS SELECT * FROM _spans_batch WHERE {_KEEP_SPANS}")
    finally:
        con.unregister("_spans_batch")


# Spans are parsed in batches of about this much attribute text, so a silver build's memory
# follows the batch, not the span file or the collection (token-id reprs make one proxied
# call tens of kilobytes).
SPAN_BATCH_BYTES = 8 << 20
_READ_ROWS = 128
# One DuckDB thread per silver build: a batch is too small to gain from more (measured on 2
# cores: a 200 M-token rebuild as fast, a small one faster), and each thread keeps buffers of
# its own, which raised the peak by ~100 MB on a warehouse of several collections.
SILVER_THREADS = 1


def span_batches(files: list[Path]) -> Iterator[pa.Table]:
    """The collection's spans (SPAN_COLUMNS + ``span_index``) in order, in batches of about
    ``SPAN_BATCH_BYTES`` of attributes; ``span_index`` is file number * 10^12 + row in file."""
    pending: list[pa.Table] = []
    size = 0
    for n, path in enumerate(files):
        row = 0
        for batch in iter_batches([path], SPAN_COLUMNS, batch_size=_READ_ROWS):
            index = np.arange(row, row + batch.num_rows, dtype=np.int64) + n * 1_000_000_000_000
            row += batch.num_rows
            pending.append(pa.Table.from_batches([batch]).append_column("span_index", arrow_ints(index)))
            size += batch.column("attributes").nbytes
            if size >= SPAN_BATCH_BYTES:
                yield pa.concat_tables(pending)
                pending, size = [], 0
    if pending or not files:
        empty = schemas.SPANS.empty_table().select(SPAN_COLUMNS)
        no_index = arrow_ints(np.zeros(0, np.int64))
        yield pa.concat_tables(pending) if pending else empty.append_column("span_index", no_index)


def _query(con: duckdb.DuckDBPyConnection, sql: str) -> pa.Table:
    """Run ``sql``; if a span's attributes are not valid JSON, skip those spans and retry."""
    try:
        return con.sql(sql.replace("{valid}", "")).to_arrow_table()
    except duckdb.Error:
        return con.sql(sql.replace("{valid}", "AND json_valid(attributes)")).to_arrow_table()


def _choice_ids_text(choices: pa.ChunkedArray) -> pa.Array:
    series = pl.Series("c", choices.combine_chunks() if choices.num_chunks else pa.nulls(0, pa.string()))
    return series.cast(pl.String).str.extract(_CHOICE_IDS_RE, 1).to_arrow()


def _pick(ok: pa.Array, a: pa.Array, b: pa.Array) -> pa.Array:
    return pc.if_else(ok, a, b)


def extract_calls(con: duckdb.DuckDBPyConnection, collection_id: str) -> pa.Table:
    """llm_calls rows: every proxied call span, with parsed token ids or a reject reason."""
    c = _query(con, _CALLS_SQL)
    n = c.num_rows
    choice_text = _choice_ids_text(c.column("choices_text"))
    litellm = (
        pc.equal(c.column("span_name"), string_scalar(LITELLM_SPAN)).combine_chunks()
        if n
        else pa.nulls(0, pa.bool_())
    )
    response_text = (
        _pick(litellm, c.column("litellm_response_text").combine_chunks(), choice_text)
        if n
        else pa.nulls(0, pa.string())
    )
    keys = list(zip(c.column("rollout_id").to_pylist(), c.column("attempt_id").to_pylist(), strict=True))
    p_ids, p_ok = parse_prompt_lists(c.column("prompt_text"), keys, con)
    # Response strings are short: one bulk parse for old-patch ids and choices/litellm ids.
    texts = (
        pa.concat_arrays(
            [
                c.column("old_text").combine_chunks().cast(pa.large_string()),
                response_text.cast(pa.large_string()),
            ]
        )
        if n
        else pa.nulls(0, pa.large_string())
    )
    ids, verdict = parse_token_lists(texts, con)
    o_ids, r_ids = ids.slice(0, n), ids.slice(n, n)
    o_ok, r_ok = verdict.slice(0, n), verdict.slice(n, n)
    ok, missing = string_scalar("ok"), string_scalar(MISSING)
    old_usable = pc.equal(o_ok, ok)
    # Upstream prefers the old patch's first list and falls back to choices[0].token_ids.
    resp_ids = _pick(old_usable, o_ids, r_ids)
    resp_ok = pc.if_else(
        old_usable,
        o_ok,
        pc.if_else(pc.and_(pc.equal(r_ok, missing), pc.is_valid(c.column("old_text"))), o_ok, r_ok),
    )
    prompt_good = pc.equal(p_ok, ok)
    reason = pc.if_else(prompt_good, pc.if_else(pc.equal(resp_ok, ok), string_scalar(None), resp_ok), p_ok)
    # A rejected call keeps whichever list did parse (useful in SQL); only usable calls are read later.
    table = pa.table(
        {
            "collection_id": repeat_string(collection_id, n),
            "rollout_id": c.column("rollout_id"),
            "attempt_id": c.column("attempt_id"),
            "span_id": c.column("span_id"),
            "span_name": c.column("span_name"),
            "sequence_id": c.column("sequence_id"),
            "start_time": c.column("start_time"),
            "response_id": c.column("response_id"),
            "model": c.column("model"),
            "prompt_token_ids": p_ids,
            "response_token_ids": resp_ids,
            "reject_reason": reason,
            "token_source": repeat_string(ENGINE, n),  # a 0.3 span's ids are the engine's, when present
            "span_index": c.column("span_index"),
        }
    )
    table = table.append_column(
        "prompt_len", pc.list_value_length(table.column("prompt_token_ids")).cast(pa.int32())
    )
    table = table.append_column(
        "response_len", pc.list_value_length(table.column("response_token_ids")).cast(pa.int32())
    )
    return schemas.conform(table, schemas.LLM_CALLS)


_POLARS_TYPES = {pa.string(): pl.String, pa.int64(): pl.Int64, pa.float64(): pl.Float64}
REWARD_EXTRA = pa.schema([("reject_reason", pa.string()), ("span_index", pa.int64())])


def extract_rewards(con: duckdb.DuckDBPyConnection, collection_id: str) -> pa.Table:
    """rewards rows: every span upstream would read a reward from (rejected ones with a reason)."""
    cand = _query(con, _REWARD_CANDIDATES_SQL).to_pylist()
    rows = []
    for r in cand:
        found = reward_rules.classify(r["name"], r["attributes"])
        if found is None:
            continue
        value, source, dim, reason = found
        rows.append(
            {
                "collection_id": collection_id,
                "rollout_id": r["rollout_id"],
                "attempt_id": r["attempt_id"],
                "span_id": r["span_id"],
                "span_name": r["name"],
                "sequence_id": r["sequence_id"],
                "start_time": r["start_time"],
                "name": dim,
                "value": value,
                "source": source,
                "reject_reason": reason,
                "span_index": r["span_index"],
            }
        )
    schema = pa.schema(list(schemas.REWARDS) + list(REWARD_EXTRA))
    # Through Polars: Table.from_pylist would import pandas.
    columns = {
        f.name: pl.Series(f.name, [r.get(f.name) for r in rows], dtype=_POLARS_TYPES[f.type]).to_arrow()
        for f in schema
    }
    return pa.table(columns).cast(schema)


def extract_messages(con: duckdb.DuckDBPyConnection, collection_id: str) -> pa.Table:
    """messages rows: each chat message (input and output) of each litellm_request span."""
    m = _query(con, _MESSAGES_SQL)
    m = m.append_column("collection_id", repeat_string(collection_id, m.num_rows))
    return schemas.conform(m, schemas.MESSAGES)


def silver_pieces(wh: Warehouse, collection_id: str) -> Iterator[dict[str, pa.Table]]:
    """The three silver tables of one collection, computed a batch of spans at a time.

    Every silver row comes from one span, so the pieces laid end to end are the
    tables of the whole collection (``span_index`` keeps each span's place), and
    memory follows ``SPAN_BATCH_BYTES`` instead of the span file or the collection.
    An Agent Lightning 1.0 collection (events, not spans) is a piece per events file.
    """
    folder = wh.collection_dir(collection_id)
    storage = Storage(wh)
    manifest = storage.collection(collection_id)
    events = storage.files_of(folder, manifest, "events") if manifest is not None else []
    if events:  # a file at a time: each holds whole attempts (collect cuts files between them)
        rollouts = storage.files_of(folder, manifest, "rollouts") if manifest is not None else []
        inputs = read_table(rollouts, ["rollout_id", "input", "mode"])
        first_index = 0
        for events_file in events:
            table = read_table([events_file], schema=schemas.EVENTS)
            yield silver_from_events(table, inputs, collection_id, first_index)
            first_index += table.num_rows
        return
    con = duckdb.connect(":memory:", config={"threads": SILVER_THREADS})
    try:
        files = span_files(wh, collection_id)
        links = span_links(files, con)
        for spans in span_batches(files):
            register_spans(con, spans)
            yield {
                "llm_calls": with_agents(extract_calls(con, collection_id), links),
                "rewards": extract_rewards(con, collection_id),
                "messages": extract_messages(con, collection_id),
            }
    finally:
        con.close()


def span_links(files: list[Path], con: duckdb.DuckDBPyConnection) -> Links:
    """Every span's parent and own agent name (``collect.agents``): a call's agent may sit in
    another batch, so the tree is read first, a small batch of spans at a time."""
    links: Links = {}
    pending: list[pa.RecordBatch] = []
    size = 0
    for batch in iter_batches(files, LINK_COLUMNS, batch_size=_READ_ROWS):
        pending.append(batch)
        size += batch.column(LINK_COLUMNS.index("attributes")).nbytes
        if size >= SPAN_BATCH_BYTES:
            add_links(links, pa.Table.from_batches(pending), con)
            pending, size = [], 0
    if pending:
        add_links(links, pa.Table.from_batches(pending), con)
    return links


def with_agents(calls: pa.Table, links: Links) -> pa.Table:
    """``calls`` with ``agent``: the name of each call's enclosing agent span (null: none)."""
    keys = zip(*(calls.column(c).to_pylist() for c in ("rollout_id", "attempt_id", "span_id")), strict=True)
    at = calls.schema.get_field_index("agent")
    return calls.set_column(at, "agent", agents_of(links, keys))


def cached_manifest(wh: Warehouse, collection_id: str) -> SilverManifest | None:
    """The committed silver manifest of ``collection_id`` if it is current, else None."""
    return Storage(wh).current_silver(collection_id)


def build_silver(wh: Warehouse, collection_id: str, force: bool = False) -> SilverManifest:
    """Build (or reuse) the silver cache of one collection; return its manifest."""
    if not force:
        cached = cached_manifest(wh, collection_id)
        if cached is not None:
            return cached
    if Storage(wh).collection(collection_id) is None:
        raise UnknownCollectionError(f"collection {collection_id!r} is not committed in {wh.root}")
    return write_silver(wh, collection_id, silver_pieces(wh, collection_id))


def _parquet_options(table: pa.Table) -> dict[str, Any]:
    """Token lists: lz4 without dictionaries or statistics (a cache read on every transform,
    where decoding speed matters and neither pays); everything else zstd with dictionaries.
    Per-column options name a list's leaf column (``name.list.element``)."""
    lists = [f.name for f in table.schema if pa.types.is_list(f.type)]
    rest = [n for n in table.column_names if n not in lists]
    return {
        "compression": {**{n: "zstd" for n in rest}, **{f"{n}.list.element": "lz4" for n in lists}},
        "use_dictionary": rest,
        "write_statistics": rest,
    }


# Token lists are read back a few hundred rows at a time (transform.spill); small groups keep that flat.
CALLS_ROW_GROUP = 1024


def write_silver(
    wh: Warehouse, collection_id: str, pieces: dict[str, pa.Table] | Iterable[dict[str, pa.Table]]
) -> SilverManifest:
    """Commit computed silver tables (whole, or piece by piece) as the cache of ``collection_id``."""
    counts: dict[str, int] = {name: 0 for name in schemas.SILVER}
    counts["usable_calls"] = counts["text_calls"] = 0

    def counted() -> Iterator[dict[str, pa.Table]]:
        for piece in [pieces] if isinstance(pieces, dict) else pieces:
            for name, table in piece.items():
                counts[name] += table.num_rows
            calls = piece["llm_calls"]
            counts["usable_calls"] += calls.column("reject_reason").null_count
            counts["text_calls"] += pc.sum(pc.equal(calls.column("token_source"), TEXT)).as_py() or 0
            yield piece

    def manifest(files: list[FileEntry]) -> SilverManifest:
        return SilverManifest(
            collection_id=collection_id,
            silver_version=SILVER_VERSION,
            created_at=dt.datetime.now(dt.UTC).isoformat(),
            counts=counts,
            files=files,
        )

    return Storage(wh).replace_silver(
        collection_id, counted(), manifest, _parquet_options, {"llm_calls": CALLS_ROW_GROUP}
    )
