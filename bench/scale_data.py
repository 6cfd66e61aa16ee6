"""Synthetic warehouses of a given size in tokens, written straight into bronze Parquet.

Long multi-turn trajectories like those of the issue's table: 3-8 proxied calls
per rollout, a first prompt of 1-2k tokens that grows by each response and
some tool output (so prompts run 1-3k tokens), a reward at the end. Spans are
LLMProxy-shaped (``litellm_request`` with parts-based messages and a
``raw_gen_ai_request`` with the token ids as Python list reprs and the
response ids inside ``choices``), the same shape as
``tests.fixtures.proxy_spans`` but built as rows directly: making a few
hundred thousand agentlightning ``Span`` objects would take longer than the
benchmark itself.

Rollouts are grouped into collections of ``ROLLOUTS_PER_COLLECTION`` (one
collect run each) and span files of at most ``SPAN_FILE_BYTES`` of attribute
text, as collect writes them. Tokens are counted as the transform counts them
(prompt + response of every call).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from tracebank.warehouse import schemas
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.records import CollectionManifest, FileEntry
from tracebank.warehouse.storage import Storage

ROLLOUTS_PER_COLLECTION = 2000
SPAN_FILE_BYTES = 64 << 20
VOCAB = 32000


@dataclass
class Built:
    """What was generated: counts and where."""

    collections: int
    rollouts: int
    calls: int
    spans: int
    tokens: int


def _ids_text(ids: np.ndarray) -> str:
    return ", ".join(map(str, ids.tolist()))


class _SpanRows:
    """Span rows of one collection, flushed into files of at most SPAN_FILE_BYTES."""

    def __init__(self, storage: Storage, folder: Path, cid: str) -> None:
        self.storage, self.folder, self.cid = storage, folder, cid
        self.cols: dict[str, list[Any]] = {f.name: [] for f in schemas.SPANS}
        self.bytes = 0
        self.entries: list[FileEntry] = []
        self.count = 0

    def add(self, rid: str, aid: str, seq: int, name: str, span_id: str, attrs: str, t: float) -> None:
        row = {
            "collection_id": self.cid,
            "rollout_id": rid,
            "attempt_id": aid,
            "sequence_id": seq,
            "trace_id": f"{seq:032x}",
            "span_id": span_id,
            "parent_id": None,
            "name": name,
            "status": '{"description": null, "status_code": "OK"}',
            "attributes": attrs,
            "events": "[]",
            "links": "[]",
            "start_time": t,
            "end_time": t + 0.01,
            "context": None,
            "parent": None,
            "resource": '{"attributes": {}, "schema_url": ""}',
        }
        for k, v in row.items():
            self.cols[k].append(v)
        self.bytes += len(attrs)
        self.count += 1
        if self.bytes >= SPAN_FILE_BYTES:
            self.flush()

    def flush(self) -> None:
        if not self.cols["span_id"]:
            return
        table = pa.table({f.name: pa.array(self.cols[f.name], f.type) for f in schemas.SPANS})
        name = f"spans-{len(self.entries):04d}.parquet"
        self.entries.append(self.storage.write_table(self.folder, name, table, "spans"))
        self.cols = {f.name: [] for f in schemas.SPANS}
        self.bytes = 0


def _rollout(
    rng: np.random.Generator, spans: _SpanRows, i: int, t0: float
) -> tuple[dict[str, Any], dict[str, Any], int, int]:
    """One rollout's spans; returns (rollout row, attempt row, calls, tokens)."""
    rid, aid = f"ro-{i:07d}", f"at-{i:07d}-0"
    prompt = rng.integers(0, VOCAB, int(rng.integers(1000, 2000)), dtype=np.int32)
    prompt_text = _ids_text(prompt)
    n_calls = int(rng.integers(3, 9))
    tokens = 0
    for seq in range(1, n_calls + 1):
        response = rng.integers(0, VOCAB, int(rng.integers(50, 300)), dtype=np.int32)
        response_text = _ids_text(response)
        t = t0 + i + seq * 0.01
        resp_id = f"chatcmpl-{i:07d}-{seq}"
        messages = json.dumps(
            [{"role": "user", "parts": [{"type": "text", "content": f"turn {seq} " + "word " * 200}]}]
        )
        out = json.dumps(
            [
                {
                    "role": "assistant",
                    "parts": [{"type": "text", "content": "reply " * 60}],
                    "finish_reason": "stop",
                }
            ]
        )
        litellm = {
            "gen_ai.request.model": "tiny-qwen",
            "gen_ai.response.id": resp_id,
            "gen_ai.input.messages": messages,
            "gen_ai.output.messages": out,
            "gen_ai.usage.input_tokens": len(prompt),
            "gen_ai.usage.output_tokens": len(response),
        }
        choices = (
            "[{'index': 0, 'message': {'role': 'assistant', 'content': 'reply'}, "
            f"'finish_reason': 'stop', 'token_ids': [{response_text}]}}]"
        )
        # Built as text: json.dumps of the long id strings would cost more than everything else.
        raw = (
            f'{{"llm.hosted_vllm.choices": "{choices}", "llm.hosted_vllm.id": "{resp_id}", '
            f'"llm.hosted_vllm.model": "tiny-qwen", "llm.hosted_vllm.prompt_token_ids": "[{prompt_text}]"}}'
        )
        spans.add(rid, aid, seq, "litellm_request", f"l{i:07d}{seq:02d}", json.dumps(litellm), t)
        spans.add(rid, aid, seq, "raw_gen_ai_request", f"r{i:07d}{seq:02d}", raw, t + 0.001)
        tokens += len(prompt) + len(response)
        tool = rng.integers(0, VOCAB, int(rng.integers(100, 300)), dtype=np.int32)
        prompt = np.concatenate([prompt, response, tool])
        prompt_text = f"{prompt_text}, {response_text}, {_ids_text(tool)}"
    reward = {"agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": float(rng.random())}
    spans.add(rid, aid, n_calls + 1, "agentlightning.annotation", f"w{i:07d}", json.dumps(reward), t0 + i + 1)
    rollout = {
        "rollout_id": rid,
        "input": json.dumps({"question": f"task {i % 500}"}),
        "start_time": t0 + i,
        "end_time": t0 + i + 1,
        "mode": "train",
        "resources_id": "rs-1",
        "status": "succeeded",
        "config": "{}",
        "metadata": "{}",
    }
    attempt = {
        "rollout_id": rid,
        "attempt_id": aid,
        "sequence_id": 1,
        "start_time": t0 + i,
        "end_time": t0 + i + 1,
        "status": "succeeded",
        "worker_id": "worker-0",
        "last_heartbeat_time": t0 + i + 1,
        "metadata": "{}",
    }
    return rollout, attempt, n_calls, tokens


def _table(rows: list[dict[str, Any]], schema: pa.Schema, cid: str) -> pa.Table:
    return pa.table(
        {
            f.name: pa.array(
                [cid] * len(rows) if f.name == "collection_id" else [r[f.name] for r in rows], f.type
            )
            for f in schema
        }
    )


def build_warehouse(root: Path, tokens: int, seed: int = 13, rollouts: int | None = None) -> Built:
    """A warehouse at ``root`` holding at least ``tokens`` tokens of rollouts (or, when
    ``rollouts`` is given, that many rollouts, whatever their tokens)."""
    if rollouts is not None:
        tokens = 1 << 62

    def more() -> bool:
        return total.tokens < tokens and (rollouts is None or total.rollouts < rollouts)

    wh = Warehouse(root).init()
    storage = Storage(wh)
    rng = np.random.default_rng(seed)
    total = Built(0, 0, 0, 0, 0)
    t0 = 1_700_000_000.0
    while more():
        cid = f"20260101T{total.collections:06d}000000-scale{total.collections:03d}"
        folder = wh.collection_dir(cid)
        spans = _SpanRows(storage, folder, cid)
        rows, attempts = [], []
        while len(rows) < ROLLOUTS_PER_COLLECTION and more():
            rollout, attempt, calls, n = _rollout(rng, spans, total.rollouts, t0)
            rows.append(rollout)
            attempts.append(attempt)
            total.rollouts += 1
            total.calls += calls
            total.tokens += n
        spans.flush()
        files = [
            storage.write_table(
                folder, "rollouts-0000.parquet", _table(rows, schemas.ROLLOUTS, cid), "rollouts"
            ),
            storage.write_table(
                folder, "attempts-0000.parquet", _table(attempts, schemas.ATTEMPTS, cid), "attempts"
            ),
            *spans.entries,
        ]
        manifest = CollectionManifest(
            collection_id=cid,
            created_at=dt.datetime.now(dt.UTC).isoformat(),
            tag="scale-bench",
            store_url="bench://scale_data",
            counts={"rollouts": len(rows), "attempts": len(attempts), "spans": spans.count},
            files=files,
        )
        storage.commit_collection(folder, manifest)
        total.collections += 1
        total.spans += spans.count
    return total
