"""The tail every engine and rule set shares: reserve the next version, hash it, skip an identical one,
commit it (manifest last) or abandon it.

A builder hands over its planned rows (:class:`Planned`) and how to open a split's files in the
reserved folder (``writer.SplitOpener``). Each split's rows digest is known once its files are
opened (streamed, or built whole in memory); the content hash digests them all, and only then
is it stamped into every file, so an identical version (same hash) writes nothing. On any
failure the reserved folder is removed, and a reader never sees it in between (no manifest yet).
"""

from __future__ import annotations

import contextlib
import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
from tracebank.core.versions import tracebank_version
from tracebank.transform.config import TransformConfig
from tracebank.transform.inputs import Chosen
from tracebank.transform.manifest import content_hash, identical_line, source_hash, stats, summary_line
from tracebank.transform.provenance import identical_version, metadata_fields, served_models
from tracebank.transform.writer import OpenSplit, SplitOpener
from tracebank.warehouse import layout
from tracebank.warehouse.catalog import DatasetRef
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.records import DatasetManifest, FileEntry
from tracebank.warehouse.storage import Storage, encode_parquet


@dataclass(frozen=True)
class TransformResult:
    """The committed version: its reference, folder and manifest."""

    ref: DatasetRef
    folder: Path
    record: DatasetManifest
    identical: bool = False
    """Nothing was written: an existing version has this content hash (see ``--force``)."""

    @property
    def manifest(self) -> dict[str, Any]:
        """The manifest as committed (its JSON form)."""
        return self.record.to_json()

    def summary(self) -> str:
        return (
            identical_line(str(self.ref), self.record.content_hash)
            if self.identical
            else summary_line(self.manifest)
        )


@dataclass(frozen=True)
class Planned:
    """A version's rows before anything is written, and what building them counted."""

    splits: dict[str, pl.DataFrame]
    """Each split's row plan (``length``, ``trained``, ``reward`` at least), train first; an empty
    split is left out of the files and the hash."""

    counts: dict[str, Any]
    """The manifest's ``counts``."""

    tables: dict[str, pa.Table] = field(default_factory=dict)
    """Other tables committed with the version, by warehouse table name (``merge_diagnostics``):
    derived from the same inputs and options as the rows, so the content hash covers them."""


def commit_version(
    wh: Warehouse, config: TransformConfig, chosen: Chosen, planned: Planned, open_split: SplitOpener
) -> TransformResult:
    """Write ``planned`` as the next version of ``config.name`` and commit it, unless an existing
    version has its content hash (and ``config.force`` is off): then nothing is written."""
    sources = [{"collection_id": cid, "content_hash": source_hash(m)} for cid, m in chosen]
    storage = Storage(wh)
    version, folder = storage.reserve_version(config.name)
    provenance = {
        "dataset": config.name,
        "version": version,
        "tracebank_version": tracebank_version(),
        "served_models": served_models(config, chosen) or None,
    }
    try:
        with contextlib.ExitStack() as stack:
            opened: list[OpenSplit] = []
            digests = []
            for split, frame in planned.splits.items():
                if frame.height == 0:
                    continue
                opened.append(open_split(stack, storage, folder, split, frame, provenance))
                digests.append({"split": split, "rows": frame.height, "digest": opened[-1].digest})
            hashed = content_hash(config, sources, digests)
            same = None if config.force else identical_version(wh, config.name, hashed)
            if same is None:
                for split_files in opened:
                    split_files.stamp({"content_hash": hashed})
        if same is not None:
            storage.abandon_version(folder)  # nothing of an identical version is committed
            existing_folder, existing = same
            return TransformResult(
                DatasetRef(config.name, existing.version), existing_folder, existing, identical=True
            )
        files = [entry for split_files in opened for entry in split_files.entries()]
        stamped = {**provenance, "content_hash": hashed}
        files += [_write_table(storage, folder, n, t, stamped) for n, t in planned.tables.items()]
        st = stats(planned.splits, [split_files.max_token_id for split_files in opened])
        manifest = version_manifest(config, version, hashed, sources, planned.counts, st, files)
        storage.commit_version(folder, manifest)
    except BaseException:
        storage.abandon_version(folder)
        raise
    return TransformResult(DatasetRef(config.name, version), folder, manifest)


def _write_table(
    storage: Storage, folder: Path, name: str, table: pa.Table, provenance: dict[str, Any]
) -> FileEntry:
    """``table`` as the version's file of warehouse table ``name`` (its values are record data)."""
    stamped = table.replace_schema_metadata(metadata_fields(provenance))
    data = encode_parquet(stamped, write_page_checksum=True, compression="zstd")
    return storage.write_buffer(folder, layout.version_table_file(name), data, table.num_rows, name)


def version_manifest(
    config: TransformConfig,
    version: int,
    content_hash: str,
    sources: list[dict[str, Any]],
    counts: dict[str, Any],
    st: dict[str, Any],
    files: list[FileEntry],
) -> DatasetManifest:
    """The manifest of version ``version`` of ``config.name``, made now by this tracebank."""
    return DatasetManifest(
        name=config.name,
        version=version,
        created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        tracebank_version=tracebank_version(),
        content_hash=content_hash,
        params=config.params(),
        sources=sources,
        counts=counts,
        stats=st,
        rows=st["rows"],
        notes=dict(config.extra) if config.extra else None,
        config=config.settings(),
        files=files,
    )
