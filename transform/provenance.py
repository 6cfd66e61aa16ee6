"""Provenance written into each dataset file, and the check that skips an identical rebuild.

A split file copied out of the warehouse still says what it is: Parquet key-value
metadata names the dataset, version, split, content hash, the tracebank version and,
when the collections recorded it, the model that served the calls (whose tokenizer made
the ids). ``pyarrow.parquet.read_schema(path).metadata`` or DuckDB's
``parquet_kv_metadata(path)`` read it back.

The content hash is known only after every split's rows are written (it digests them),
so a streamed file gets it last, through its still open writer
(``warehouse.storage.ParquetStream.add_metadata``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tracebank.transform.config import TransformConfig
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.records import CollectionManifest, DatasetManifest
from tracebank.warehouse.storage import Storage

PREFIX = "tracebank."


def served_models(config: TransformConfig, chosen: list[tuple[str, CollectionManifest]]) -> list[str]:
    """The models that answered the source rounds' calls, as the round recorded them (if it did)."""
    rounds = [m.extra.get("round") or {} for _, m in chosen] + [config.extra.get("round") or {}]
    return sorted({str(r["model"]) for r in rounds if isinstance(r, dict) and r.get("model")})


def metadata_fields(fields: dict[str, Any]) -> dict[bytes, bytes]:
    """``fields`` as ``tracebank.*`` Parquet key-value metadata (None values left out)."""
    meta: dict[bytes, bytes] = {}
    for key, value in fields.items():
        if value is None:
            continue
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        meta[(PREFIX + key).encode()] = text.encode()
    return meta


def identical_version(wh: Warehouse, name: str, content_hash: str) -> tuple[Path, DatasetManifest] | None:
    """The newest committed version of ``name`` with this content hash, if there is one."""
    for folder, manifest in reversed(Storage(wh).dataset_versions(name)):
        if manifest.content_hash == content_hash:
            return folder, manifest
    return None
