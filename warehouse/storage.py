"""The one owner of committed data: every read of a committed file and every commit goes here.

Stages never open a committed Parquet file or write a manifest themselves (the architecture
test enforces it); they call a :class:`Storage`. Each state change of a folder is one
method: write a data file under its final, unique name, commit a collection, reserve and
commit (or abandon) a dataset version, replace a silver cache, write or update a run
record. Manifests are typed (:mod:`tracebank.warehouse.records`) and written last.

Paths are built from the folder a manifest lives in plus the names it lists, and data
files are only ever created under names no other writer can pick (a reserved version
folder, or a random build suffix), so the same transitions map onto object storage
(upload under a unique key, then put the manifest; conditional create where two writers
could claim a name) without changing a caller.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import io
import json
import shutil
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq
from tracebank.warehouse import commit, mirror, schemas
from tracebank.warehouse.claims import Owner
from tracebank.warehouse.commit import check_sizes, verify_hashes
from tracebank.warehouse.contract import SILVER_VERSION
from tracebank.warehouse.errors import CorruptFileError, WarehouseError
from tracebank.warehouse.layout import MANIFEST, Warehouse
from tracebank.warehouse.records import (
    CollectionManifest,
    DatasetManifest,
    FileEntry,
    Manifest,
    RunRecord,
    SilverManifest,
)

M = TypeVar("M", bound=Manifest)

__all__ = [
    "Storage",
    "check_sizes",
    "entry_paths",
    "files_of",
    "iter_batches",
    "read_manifest",
    "read_table",
    "verify_hashes",
]

RUN_RECORD = "run.json"
RUN_METRICS = "metrics.jsonl"


def read_manifest(folder: Path, kind: type[M]) -> M | None:
    """The committed, validated manifest of ``folder``; None when it was never committed."""
    path = folder / MANIFEST
    data = _read_json(path)
    return None if data is None else kind.from_json(data, str(path))


def _read_json(path: Path) -> Any:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CorruptFileError(f"{path} is not valid JSON: {exc}") from exc


PROCESS_GONE = "process gone"


def settle_run(record: RunRecord) -> RunRecord:
    """``record``, shown as failed ("process gone") when it says running but the process that ran
    it has ended (SIGKILL, OOM, power loss) on this host; the file is left as it is (`tracebank gc`
    writes the verdict). A run of another host stays running: its end cannot be seen from here."""
    if record.status != "running" or not record.owner:
        return record
    owner = Owner.from_dict(record.owner)
    if owner.alive() is not False:
        return record
    gone = f"{PROCESS_GONE}: pid {owner.pid} on {owner.host} ended without finishing the run"
    return dataclasses.replace(record, status="failed", error=gone)


def _subdirs(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.is_dir()) if path.exists() else []


def version_number(folder: Path) -> int:
    """``v0003`` -> 3."""
    return int(folder.name.lstrip("v"))


def files_of(folder: Path, manifest: Manifest, table: str | None = None) -> list[Path]:
    """Paths of the files ``manifest`` lists (of ``table`` only, when given), in commit order."""
    return entry_paths(folder, manifest.files_of(table))


def entry_paths(folder: Path, entries: list[FileEntry]) -> list[Path]:
    """Local paths of committed files ``entries`` of ``folder``; in a mirror of a warehouse on
    object storage, the ones not read on this machine before are downloaded (and checked) first."""
    mirror.ensure_files(folder, entries)
    return [folder / e.path for e in entries]


def read_table(
    paths: list[Path], columns: list[str] | None = None, schema: pa.Schema | None = None
) -> pa.Table:
    """Committed Parquet files as one table (cast to ``schema`` when given); a damaged file is named."""
    if not paths:
        if schema is None:
            raise WarehouseError("no files to read")
        return schema.empty_table()
    tables = []
    for path in paths:
        try:
            table = pq.ParquetFile(path, page_checksum_verification=True).read(columns=columns)
        except (OSError, pa.ArrowException) as exc:
            raise CorruptFileError(
                f"unreadable Parquet file {path}: {exc}",
                "restore it, or move its folder out of the warehouse",
            ) from exc
        tables.append(table.cast(schema) if schema is not None else table)
    return pa.concat_tables(tables)


def iter_batches(paths: list[Path], columns: list[str], batch_size: int = 512) -> Iterator[pa.RecordBatch]:
    """The rows of committed Parquet files, batch by batch (memory: a few batches)."""
    for path in paths:
        parquet = pq.ParquetFile(path, page_checksum_verification=True)
        yield from parquet.iter_batches(batch_size=batch_size, columns=columns)


def parquet_scan_sql(path: Path, row_number: bool = False) -> str:
    """A DuckDB ``read_parquet(...)`` expression over one committed file."""
    quoted = str(path).replace("'", "''")
    return f"read_parquet('{quoted}'{', file_row_number = true' if row_number else ''})"


def encode_parquet(table: pa.Table, **options: Any) -> pa.Buffer:
    """``table`` as Parquet bytes in memory, to hash and commit with :meth:`Storage.write_buffer`."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, **options)
    return sink.getvalue()


class _HashingFile(io.RawIOBase):
    """A write-only file that also feeds sha256, so a streamed file needs no read back."""

    def __init__(self, fh: BinaryIO) -> None:
        self.fh, self.sha, self.size = fh, hashlib.sha256(), 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self.fh.write(view)
        self.sha.update(view)
        self.size += view.nbytes
        return view.nbytes


class ParquetStream:
    """One Parquet file being written by :meth:`Storage.parquet_stream`."""

    def __init__(self, writer: pq.ParquetWriter, table_name: str) -> None:
        self.writer, self.table_name, self.rows = writer, table_name, 0
        self.entry: FileEntry | None = None

    def write(self, table: pa.Table, row_group_size: int | None = None) -> None:
        """Append ``table``'s rows (one or more row groups)."""
        self.writer.write_table(table, row_group_size=row_group_size)
        self.rows += table.num_rows

    def add_metadata(self, metadata: dict[bytes, bytes]) -> None:
        """Add key-value metadata known only after the rows, as if the schema had held it.

        Arrow readers (``pq.read_schema``, ``pq.read_table``) take a file's schema metadata
        from the ``ARROW:schema`` entry the writer stored when it opened, not from the plain
        entries: that entry is replaced too (a later key wins), so every reader sees it.
        """
        schema = self.writer.schema
        whole = schema.with_metadata({**(schema.metadata or {}), **metadata})
        arrow_schema = base64.b64encode(whole.serialize().to_pybytes())
        self.writer.add_key_value_metadata({**metadata, b"ARROW:schema": arrow_schema})


@dataclass(frozen=True)
class Storage:
    """Every read and transition of committed data in one warehouse."""

    wh: Warehouse

    @property
    def remote(self) -> bool:
        """Whether the warehouse lives on object storage (``wh.root`` is then its local mirror)."""
        return self.wh.remote is not None

    # -- reading ---------------------------------------------------------------------------
    def collections(self) -> list[tuple[Path, CollectionManifest]]:
        """Committed collections, oldest first (ids sort by time)."""
        if self.remote:
            mirror.pull_folders(self.wh, self.wh.collections_dir, CollectionManifest)
        return self._committed(_subdirs(self.wh.collections_dir), CollectionManifest)

    def collection(self, collection_id: str) -> CollectionManifest | None:
        folder = self.wh.collection_dir(collection_id)
        if self.remote and not (folder / MANIFEST).exists():
            mirror.pull_folder(self.wh, folder, CollectionManifest)
        return read_manifest(folder, CollectionManifest)

    def silver_caches(self) -> list[tuple[Path, SilverManifest]]:
        """Committed silver caches, one per collection they were derived from."""
        if self.remote:
            mirror.pull_folders(self.wh, self.wh.silver_dir, SilverManifest)
        return self._committed(_subdirs(self.wh.silver_dir), SilverManifest)

    def silver(self, collection_id: str) -> SilverManifest | None:
        folder = self.wh.silver_collection_dir(collection_id)
        if self.remote:  # a silver cache is replaced in place: ask the store every time
            mirror.pull_folder(self.wh, folder, SilverManifest)
        return read_manifest(folder, SilverManifest)

    def current_silver(self, collection_id: str) -> SilverManifest | None:
        """The committed silver cache of ``collection_id`` if this code's SILVER_VERSION built it."""
        manifest = self.silver(collection_id)
        if manifest is None or manifest.silver_version != SILVER_VERSION:
            return None
        return manifest

    def silver_batches(self, collection_id: str, table: str, columns: list[str]) -> Iterator[pa.RecordBatch]:
        """One table of a current silver cache, a few hundred rows at a time (memory: a batch)."""
        manifest = self.current_silver(collection_id)
        if manifest is None:
            raise WarehouseError(f"silver cache of {collection_id} is missing or stale")
        yield from iter_batches(
            files_of(self.wh.silver_collection_dir(collection_id), manifest, table), columns, 256
        )

    def silver_table(self, collection_id: str, table: str, columns: list[str] | None = None) -> pa.Table:
        """One table of a current silver cache (see :meth:`current_silver`; the caller checked it)."""
        manifest = self.current_silver(collection_id)
        if manifest is None:
            raise WarehouseError(f"silver cache of {collection_id} is missing or stale")
        files = files_of(self.wh.silver_collection_dir(collection_id), manifest, table)
        if not files:
            return schemas.SILVER[table].empty_table().select(columns or schemas.SILVER[table].names)
        try:
            return read_table(files, columns=columns)
        except CorruptFileError as exc:  # a silver file deleted or damaged: it is a cache of bronze
            raise CorruptFileError(
                exc.message,
                f"rebuild it with `tracebank collect --rebuild-silver --collection {collection_id}`",
            ) from exc

    def dataset_names(self) -> list[str]:
        if self.remote:
            return mirror.children(self.wh, self.wh.datasets_dir)
        return [p.name for p in _subdirs(self.wh.datasets_dir)]

    def dataset_versions(self, name: str | None = None) -> list[tuple[Path, DatasetManifest]]:
        """Committed dataset versions (of ``name``, or of every dataset), by name then version."""
        out: list[tuple[Path, DatasetManifest]] = []
        for n in [name] if name else self.dataset_names():
            if self.remote:
                mirror.pull_folders(self.wh, self.wh.dataset_dir(n), DatasetManifest)
            folders = [p for p in _subdirs(self.wh.dataset_dir(n)) if p.name.startswith("v")]
            out.extend(self._committed(folders, DatasetManifest))
        return out

    def runs(self) -> list[tuple[Path, RunRecord]]:
        """Every run record, oldest first; a run is visible from its start."""
        if self.remote:
            mirror.pull_runs(self.wh)
        out = []
        for folder in _subdirs(self.wh.runs_dir):
            path = folder / RUN_RECORD
            data = _read_json(path)
            if data is not None:
                out.append((folder, settle_run(RunRecord.from_json(data, str(path)))))
        return out

    def run_metrics(self, folder: Path) -> list[dict[str, Any]]:
        """A run's metric events; a line being appended right now is skipped."""
        path = folder / RUN_METRICS
        if not path.exists():
            return []
        events = []
        for line in path.read_text().splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                events.append(event)
        return events

    @staticmethod
    def _committed(folders: list[Path], kind: type[M]) -> list[tuple[Path, M]]:
        out = []
        for folder in folders:
            manifest = read_manifest(folder, kind)
            if manifest is not None:
                out.append((folder, manifest))
        return out

    # -- writing data files ----------------------------------------------------------------
    def write_table(
        self, folder: Path, name: str, table: pa.Table, table_name: str, **options: Any
    ) -> FileEntry:
        """Write ``table`` as ``folder/name`` (not yet visible: no manifest lists it)."""
        entry = commit.write_parquet_atomic(folder / name, table, **options)
        return FileEntry(table=table_name, **entry)

    def write_buffer(self, folder: Path, name: str, data: Any, rows: int, table_name: str) -> FileEntry:
        """Write Parquet bytes already in memory as ``folder/name``, hashed from memory."""
        entry = commit.write_buffer_atomic(folder / name, data, rows=rows)
        return FileEntry(table=table_name, **entry)

    # -- transitions -----------------------------------------------------------------------
    def commit_collection(self, folder: Path, manifest: CollectionManifest) -> Path:
        """Make a collection visible: its manifest, written last."""
        return self._commit(folder, manifest)

    def retire_collection(self, folder: Path) -> None:
        """Make a collection invisible (its manifest goes); its files, and its silver cache, stay
        for readers that planned against them until `tracebank gc` removes them."""
        if self.remote:
            mirror.retire(self.wh, folder)
        (folder / MANIFEST).unlink(missing_ok=True)
        commit.fsync_dir(folder)

    def reserve_version(self, name: str) -> tuple[int, Path]:
        """Claim the next free version folder of ``name`` (a concurrent writer gets another)."""
        self.wh.dataset_dir(name).mkdir(parents=True, exist_ok=True)
        if self.remote:
            first = self.next_version(name)
            version = mirror.reserve_version(self.wh, name, first, Owner.current(f"transform {name}"))
            folder = self.wh.version_dir(name, version)
            mirror.clear_local(folder)  # a number the store gave us: anything here is a crashed writer's
            folder.mkdir()
            return version, folder
        while True:
            version = self.next_version(name)
            folder = self.wh.version_dir(name, version)
            try:
                folder.mkdir()
            except FileExistsError:
                continue
            return version, folder

    def next_version(self, name: str) -> int:
        """The next free version number of ``name`` (uncommitted folders count as taken)."""
        folders = [p.name for p in _subdirs(self.wh.dataset_dir(name))]
        if self.remote:
            folders += mirror.children(self.wh, self.wh.dataset_dir(name))
        taken = [int(f[1:]) for f in folders if f.startswith("v") and f[1:].isdigit()]
        return max(taken, default=0) + 1

    def commit_version(self, folder: Path, manifest: DatasetManifest) -> Path:
        """Make a reserved dataset version visible (immutable from now on)."""
        if version_number(folder) != manifest.version or folder.parent.name != manifest.name:
            raise WarehouseError(
                f"manifest of {manifest.name}@v{manifest.version} does not belong in {folder}"
            )
        return self._commit(folder, manifest)

    def abandon_version(self, folder: Path) -> None:
        """Drop a reserved version that failed before its commit."""
        if self.remote:
            mirror.release_version(self.wh, folder)
        shutil.rmtree(folder, ignore_errors=True)

    def replace_silver(
        self,
        collection_id: str,
        tables: dict[str, pa.Table] | Iterable[dict[str, pa.Table]],
        make: Any,
        options: Any = None,
        row_groups: dict[str, int] | None = None,
    ) -> SilverManifest:
        """Commit silver tables as the cache of ``collection_id``, replacing the previous one.

        ``tables`` is one dict of tables, or an iterable of such dicts (pieces of each
        table, in order, streamed into one file per table so memory follows a piece);
        ``make(files)`` builds the manifest from the written file entries;
        ``options(table)`` gives each file's Parquet options and ``row_groups`` a
        table's row-group size. Files get a fresh build suffix, so the previous cache
        stays readable until the new manifest replaces it; its files stay after that for
        readers that read the old manifest a moment ago, until `tracebank gc` (after its --min-age).
        """
        folder = self.wh.silver_collection_dir(collection_id)
        build = uuid.uuid4().hex[:8]
        pieces = [tables] if isinstance(tables, dict) else tables
        streams: dict[str, ParquetStream] = {}
        with contextlib.ExitStack() as stack:
            for piece in pieces:
                for name, table in piece.items():
                    if name not in streams:
                        streams[name] = stack.enter_context(
                            self.parquet_stream(
                                folder,
                                f"{name}-{build}.parquet",
                                name,
                                table.schema,
                                **(options(table) if options else {}),
                            )
                        )
                    streams[name].write(table, (row_groups or {}).get(name))
        manifest: SilverManifest = make([s.entry for s in streams.values()])
        self._commit(folder, manifest)
        return manifest

    @contextlib.contextmanager
    def parquet_stream(
        self, folder: Path, name: str, table_name: str, schema: pa.Schema, **options: Any
    ) -> Iterator[ParquetStream]:
        """Write ``folder/name`` a table at a time (not yet visible: no manifest lists it).

        The file is hashed as it is written and renamed into place when the block
        ends without an error; ``stream.entry`` is then its manifest entry.
        """
        with commit.atomic_path(folder / name) as tmp, open(tmp, "wb") as fh:
            sink = _HashingFile(fh)
            stream = ParquetStream(pq.ParquetWriter(sink, schema, **options), table_name)
            try:
                yield stream
            finally:
                stream.writer.close()
        stream.entry = FileEntry(
            table=table_name, path=name, bytes=sink.size, sha256=sink.sha.hexdigest(), rows=stream.rows
        )

    def start_run(self, record: RunRecord) -> Path:
        """Create a run's folder (its id must be new), its record and an empty metrics file."""
        folder = self.wh.run_dir(record.run_id)
        folder.mkdir(parents=True, exist_ok=False)
        (folder / RUN_METRICS).touch()
        self.write_run(record)
        return folder

    def write_run(self, record: RunRecord) -> None:
        """Replace a run's record atomically: readers see the previous or the next state."""
        folder = self.wh.run_dir(record.run_id)
        commit.write_json_atomic(folder / RUN_RECORD, record.to_json())
        if self.remote:  # metrics first, so a finished record never points at fewer metrics
            mirror.push_file(self.wh, folder / RUN_METRICS)
            mirror.push_file(self.wh, folder / RUN_RECORD)

    def append_metric(self, run_id: str, event: dict[str, Any]) -> None:
        """Append one metric event (a line) to a run's metrics.jsonl."""
        path = self.wh.run_dir(run_id) / RUN_METRICS
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(event, sort_keys=True) + "\n")
            fh.flush()
        if self.remote and mirror.push_due(path):
            mirror.push_file(self.wh, path)

    def _commit(self, folder: Path, manifest: Manifest) -> Path:
        for entry in manifest.files:
            if not (folder / entry.path).exists():
                raise WarehouseError(f"refusing to commit {folder}: {entry.path} is missing")
        path = folder / MANIFEST
        payload = commit.json_bytes({**manifest.to_json(), "format_version": manifest.FORMAT_VERSION})
        if self.remote:  # the store first: the mirror never shows what the store does not hold
            exclusive = not isinstance(manifest, SilverManifest)
            mirror.push_commit(self.wh, folder, payload, [e.path for e in manifest.files], exclusive)
        commit.write_bytes_atomic(path, payload)
        return path
