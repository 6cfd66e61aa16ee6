"""Statistics, content hash and manifest of a dataset version; its summary line."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np
import polars as pl

from transform.config import TransformConfig

# Bump when the same inputs and options would produce different rows.
ROWS_FORMAT = 1

# Options that change where or how fast a version is built, not what it holds.
_NOT_HASHED = ("name", "rebuild_silver", "collections")


def source_hash(manifest: dict[str, Any]) -> str:
    """A collection's content hash: its own if it records one, else one over its file hashes."""
    if manifest.get("content_hash"):
        return str(manifest["content_hash"])
    parts = sorted(f"{e.get('table', '')}:{e['path']}:{e.get('sha256', '')}"
                   for e in manifest.get("files", []))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def content_hash(config: TransformConfig, sources: list[dict[str, Any]],
                 files: list[dict[str, Any]]) -> str:
    """Deterministic: the same sources, options and rows give the same hash (never the time)."""
    params = {k: v for k, v in config.params().items() if k not in _NOT_HASHED}
    doc = {
        "rows_format": ROWS_FORMAT,
        "params": params,
        "sources": sorted((s["collection_id"], s["content_hash"]) for s in sources),
        "files": sorted((f["split"], f["rows"], f["sha256"]) for f in files),
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _quantiles(values: np.ndarray) -> dict[str, float | int]:
    if not len(values):
        return {}
    q = np.quantile(values, [0.5, 0.9, 0.99])
    return {"min": int(values.min()), "p50": float(q[0]), "p90": float(q[1]), "p99": float(q[2]),
            "max": int(values.max()), "mean": round(float(values.mean()), 3)}


def stats(splits: dict[str, pl.DataFrame]) -> dict[str, Any]:
    """Token, length and reward statistics over every split (and rows per split)."""
    frames = [f for f in splits.values() if f.height]
    rows = pl.concat([f.select("length", "trained", "reward", "input_ids") for f in frames]) if frames \
        else pl.DataFrame({"length": [], "trained": [], "reward": [], "input_ids": []})
    lengths = rows.get_column("length").to_numpy() if rows.height else np.zeros(0, np.int64)
    rewards = rows.get_column("reward").to_numpy() if rows.height else np.zeros(0)
    max_id = rows.select(pl.col("input_ids").list.max().max()).item() if rows.height else None
    return {
        "rows": rows.height,
        "rows_by_split": {name: f.height for name, f in splits.items()},
        "tokens": int(lengths.sum()),
        "trained_tokens": int(rows.get_column("trained").sum()) if rows.height else 0,
        "max_length": int(lengths.max()) if len(lengths) else 0,
        "max_token_id": int(max_id) if max_id is not None else None,
        "reward": ({"min": float(rewards.min()), "max": float(rewards.max()),
                    "mean": round(float(rewards.mean()), 6)} if len(rewards) else {}),
        "lengths": _quantiles(lengths),
    }


def summary_line(manifest: dict[str, Any]) -> str:
    """``wrote NAME@vN: R rows (of C calls; U unrewarded, X rejected), T tokens, hash H``."""
    c = manifest["counts"]
    rejected = sum(c.get("rejected", {}).values())
    return (f"wrote {manifest['name']}@v{manifest['version']}: {manifest['rows']:,} rows "
            f"(of {c['calls']:,} calls; {c['unrewarded']:,} unrewarded, {rejected:,} rejected), "
            f"{manifest['stats']['tokens']:,} tokens, hash {manifest['content_hash'][:8]}")
