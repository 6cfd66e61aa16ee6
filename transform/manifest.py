"""Statistics, content hash and manifest of a dataset version; its summary line."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import xxhash
from tracebank.core.arrowutil import numpy_view
from tracebank.transform.config import TransformConfig
from tracebank.warehouse.contract import SILVER_VERSION
from tracebank.warehouse.records import CollectionManifest

# Bump when the same inputs and options would produce different rows, i.e. whenever
# transform.rows changes what a row holds (2: the hash no longer reads the Parquet bytes).
ROWS_FORMAT = 3

# Options that change where or how fast a version is built, not what it holds.
_NOT_HASHED = ("name", "collections")


def source_hash(manifest: CollectionManifest) -> str:
    """A collection's content hash: its own if it records one, else one over its file hashes."""
    if manifest.content_hash:
        return manifest.content_hash
    parts = sorted(f"{e.table or ''}:{e.path}:{e.sha256}" for e in manifest.files)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _kind(t: pa.DataType) -> str:
    """A type's name without what Parquet round trips may change (list field names, offset width)."""
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"list<{t.value_type}>"
    if pa.types.is_large_string(t):
        return "string"
    return str(t)


class RowsDigest:
    """Digest of a split's rows, fed in row order, chunk by chunk (the chunking is no part of it).

    It reads values, never the file, so the Parquet encoding (compression, page
    and row-group layout, writer version) is no part of it. Every column is
    hashed by value: numbers without nulls as little-endian bytes, token lists
    as their lengths plus their values, anything else as JSON. The token values
    (~45 MB for a 5M-token version) go through xxh3-128, which hashes them in a
    few milliseconds where sha256 would take as long as the rest of a warm
    transform; the per-column digests are then combined with sha256.
    """

    TOKEN_LISTS = ("input_ids", "attention_mask", "labels")

    def __init__(self) -> None:
        self._streams: dict[str, tuple[str, Any, Any]] = {}
        self.rows = 0

    def update(self, table: pa.Table) -> None:
        """Add the next rows (a table with the same columns as before)."""
        if table.num_rows == 0:
            return
        self.rows += table.num_rows
        for name in table.column_names:
            col = table.column(name)
            arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
            kind, first, second = self._streams.setdefault(
                name, (_kind(arr.type), hashlib.sha256(), xxhash.xxh3_128())
            )
            if pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
                offsets = numpy_view(arr.offsets)
                first.update(np.diff(offsets).astype("<i8").data)
                values = numpy_view(arr.values)[offsets[0] : offsets[-1]]
                second.update(np.ascontiguousarray(values, values.dtype.newbyteorder("<")).data)
            elif arr.null_count == 0 and str(arr.type) in ("int32", "int64", "double"):
                values = numpy_view(arr)
                first.update(np.ascontiguousarray(values, values.dtype.newbyteorder("<")).data)
            else:
                # "[a,b]" without its brackets plus a trailing comma concatenates chunk-independently.
                text = json.dumps(arr.to_pylist(), separators=(",", ":"), default=str)
                first.update((text[1:-1] + ",").encode())

    def hexdigest(self) -> str:
        h = hashlib.sha256(f"rows:{self.rows};".encode())
        for name, (kind, first, second) in self._streams.items():
            h.update(f"{name}:{kind}:{first.hexdigest()}:{second.hexdigest()};".encode())
        return h.hexdigest()


def rows_digest(table: pa.Table) -> str:
    """:class:`RowsDigest` of a whole table."""
    digest = RowsDigest()
    digest.update(table)
    return digest.hexdigest()


def content_hash(config: TransformConfig, sources: list[dict[str, Any]], files: list[dict[str, Any]]) -> str:
    """Deterministic: the same sources, options and rows give the same hash (never the time).

    ``files`` carry each split's :class:`RowsDigest` as ``digest``.
    """
    params = {k: v for k, v in config.params().items() if k not in _NOT_HASHED}
    doc = {
        "rows_format": ROWS_FORMAT,
        "silver_version": SILVER_VERSION,
        "params": params,
        "sources": sorted((s["collection_id"], s["content_hash"]) for s in sources),
        "files": sorted((f["split"], f["rows"], f["digest"]) for f in files),
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _linear_quantiles(values: np.ndarray, qs: tuple[float, ...]) -> list[float]:
    """``np.quantile(values, qs)`` (its default, linear method, to the last bit), without the
    ``numpy.ma`` import that ``np.quantile`` costs a fresh process."""
    ordered = np.sort(values.astype(np.float64))
    out = []
    for q in qs:
        pos = q * (len(ordered) - 1)
        lo = int(np.floor(pos))
        hi = min(lo + 1, len(ordered) - 1)
        a, b, t = ordered[lo], ordered[hi], pos - lo
        # numpy's _lerp: from the nearer end, so that t = 1 gives b exactly
        out.append(float(b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t))
    return out


def _quantiles(values: np.ndarray) -> dict[str, float | int]:
    if not len(values):
        return {}
    q = _linear_quantiles(values, (0.5, 0.9, 0.99))
    return {
        "min": int(values.min()),
        "p50": float(q[0]),
        "p90": float(q[1]),
        "p99": float(q[2]),
        "max": int(values.max()),
        "mean": round(float(values.mean()), 3),
    }


def stats(splits: dict[str, pl.DataFrame], max_ids: list[int | None]) -> dict[str, Any]:
    """Token, length and reward statistics over every split (and rows per split).

    ``splits`` are row plans (``length``, ``trained``, ``reward``); ``max_ids`` the
    largest input id of each written split.
    """
    frames = [f for f in splits.values() if f.height]
    rows = (
        pl.concat([f.select("length", "trained", "reward") for f in frames])
        if frames
        else pl.DataFrame({"length": [], "trained": [], "reward": []})
    )
    lengths = rows.get_column("length").to_numpy() if rows.height else np.zeros(0, np.int64)
    rewards = rows.get_column("reward").to_numpy() if rows.height else np.zeros(0)
    known = [m for m in max_ids if m is not None]
    max_id = max(known) if known else None
    return {
        "rows": rows.height,
        "rows_by_split": {name: f.height for name, f in splits.items()},
        "tokens": int(lengths.sum()),
        "trained_tokens": int(rows.get_column("trained").sum()) if rows.height else 0,
        "max_length": int(lengths.max()) if len(lengths) else 0,
        "max_token_id": int(max_id) if max_id is not None else None,
        "reward": (
            {
                "min": float(rewards.min()),
                "max": float(rewards.max()),
                "mean": round(float(rewards.mean()), 6),
            }
            if len(rewards)
            else {}
        ),
        "lengths": _quantiles(lengths),
    }


def identical_line(ref: str, content_hash: str) -> str:
    """What a transform that found its rows already committed as ``ref`` says."""
    return (
        f"identical to {ref} (hash {content_hash[:8]}): nothing written (--force writes a new version anyway)"
    )


def summary_line(manifest: dict[str, Any]) -> str:
    """``wrote NAME@vN: R rows (of C calls; U unrewarded, X rejected), T tokens, hash H`` (with a
    reward layer, ``U rollouts unscored by LAYER@vN`` in place of the unrewarded calls)."""
    c = manifest["counts"]
    if (manifest.get("params") or {}).get("kind") == "preference":
        return (
            f"wrote {manifest['name']}@v{manifest['version']}: {manifest['rows']:,} pairs from "
            f"{c['groups']:,} groups ({c['ties']:,} ties, {c['below_margin']:,} below the margin, "
            f"{c['singletons']:,} single-rollout tasks, {c['differing_prompts']:,} differing prompts), "
            f"hash {manifest['content_hash'][:8]}"
        )
    rejected = sum(c.get("rejected", {}).values())
    layer = c.get("reward_layer")
    # with a layer, its score is the reward: what it left out is what no reward reached
    left_out = (
        f"{layer['unscored_rollouts']:,} rollouts unscored by {layer['ref']}"
        if layer and "unscored_rollouts" in layer
        else f"{c['unrewarded']:,} unrewarded"
    )
    return (
        f"wrote {manifest['name']}@v{manifest['version']}: {manifest['rows']:,} rows "
        f"(of {c['calls']:,} calls; {left_out}, {rejected:,} rejected), "
        f"{manifest['stats']['tokens']:,} tokens, hash {manifest['content_hash'][:8]}" + text_note(c)
    )


def text_note(counts: dict[str, Any]) -> str:
    """What the summary adds about text calls: rows rendered by which tokenizer, what its template
    dropped (and the first example), or how many were skipped for want of --tokenizer."""
    if counts.get("text_calls_skipped"):
        return f"; {counts['text_calls_skipped']:,} text calls skipped (no token ids: pass --tokenizer)"
    text = counts.get("text")
    if not text:
        return ""
    sources = counts.get("token_source") or {}
    note = f"; {sources.get('text', 0):,} rows rendered by {text['tokenizer']['name']}"
    drops = text.get("template_drops") or {}
    if drops.get("tools") or drops.get("tool_calls"):
        note += (
            f"; its chat template dropped the tool list in {drops['tools']:,} rows and "
            f"{drops['tool_calls']:,} tool call names (first: rollout {drops['first_example']})"
        )
    failed = text.get("render_failed") or 0
    if failed:
        note += f"; {failed:,} conversations failed to render (see counts.text.first_render_failure)"
    return note + _retokenization_note(text.get("retokenization") or {})


def _retokenization_note(retok: dict[str, Any]) -> str:
    """When engine calls' messages retokenize to other ids than the engine's: how many, and where
    the first differs (the rows keep the engine's ids either way)."""
    if not retok.get("differ"):
        return ""
    first = retok["first_diff"]
    return (
        f"; {retok['differ']:,} of {retok['compared']:,} engine calls retokenize to other ids than "
        f"the engine's (first: rollout {first['rollout_id']} at token {first['position']}; rows keep "
        "the engine's ids, see counts.text.retokenization)"
    )
