"""Provenance written into each dataset file, and the check that skips an identical rebuild.

A split file copied out of the warehouse still says what it is: Parquet key-value
metadata names the dataset, version, split, content hash, the tracebank version and,
when the collections recorded it, the model that served the calls (whose tokenizer made
the ids). ``pyarrow.parquet.read_schema(path).metadata`` or DuckDB's
``parquet_kv_metadata(path)`` read it back.

The content hash is known only after every split's rows are written (it digests them),
so a streamed file gets it last, through its still open writer (:func:`stamp`).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from tracebank.transform.config import TransformConfig
from tracebank.warehouse import catalog
from tracebank.warehouse.layout import Warehouse
from tracebank.warehouse.records import CollectionManifest, DatasetManifest

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


def stamp(writer: pq.ParquetWriter, schema: pa.Schema, fields: dict[str, Any]) -> None:
    """Add ``fields`` to the key-value metadata of the file ``writer`` (opened with ``schema``)
    is still writing, as if ``schema`` had held them from the start.

    Arrow readers (``pq.read_schema``, ``pq.read_table``) take a file's schema metadata
    from the ``ARROW:schema`` entry the writer stored when it opened, not from the plain
    entries: that entry is replaced too (a later key wins), so every reader sees the fields.
    """
    meta = metadata_fields(fields)
    whole = schema.with_metadata({**(schema.metadata or {}), **meta})
    arrow_schema = base64.b64encode(whole.serialize().to_pybytes())
    writer.add_key_value_metadata({**meta, b"ARROW:schema": arrow_schema})


def identical_version(wh: Warehouse, name: str, content_hash: str) -> tuple[Path, DatasetManifest] | None:
    """The newest committed version of ``name`` with this content hash, if there is one."""
    for folder, manifest in reversed(catalog.dataset_versions(wh, name)):
        if manifest.content_hash == content_hash:
            return folder, manifest
    return None
