"""The one owner of committed data: every read of a committed file and every commit goes here.

Stages never open a committed Parquet file or write a manifest themselves (the architecture
test enforces it); they call a :class:`Storage`. Each state change of a folder is one method:
write a data file under its final, unique name, commit a collection, reserve and commit (or
abandon) a dataset version, replace a silver cache, write or update a run record. Manifests are
typed (:mod:`tracebank.warehouse.records`), the protocol is :mod:`tracebank.warehouse.commit`, and
every byte goes through the warehouse's store (:mod:`tracebank.warehouse.bytestore`), so this
code is the same for a folder and a bucket.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import io
import json
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar

from tracebank.core.errors import CorruptFileError, WarehouseError, warn_damage
from tracebank.warehouse import commit, finite, layout
from tracebank.warehouse.atomic import atomic_path, sha256_file
from tracebank.warehouse.bytestore import ByteStore
from tracebank.warehouse.claims import Owner
from tracebank.warehouse.contract import SILVER_VERSION
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.records import (
    CollectionManifest,
    DatasetManifest,
    FileEntry,
    Manifest,
    RewardLayerManifest,
    RunRecord,
    SilverManifest,
)

if TYPE_CHECKING:  # pyarrow is imported where Parquet is first read or written: `sql` never needs it
    import pyarrow as pa
    import pyarrow.parquet as pq

M = TypeVar("M", bound=Manifest)

__all__ = [
    "Storage",
    "iter_batches",
    "read_table",
]

#: How often a running run's metrics go up to a remote store (each upload is the whole file).
METRICS_PUSH_S = 5.0


def parse_manifest(store: ByteStore, folder: str, kind: type[M]) -> M | None:
    """The committed, validated manifest of the folder key ``folder``; None when never committed."""
    key = f"{folder}/{layout.MANIFEST}"
    where = f"{store.uri}/{key}"
    try:
        data = commit.read_json(store, key)
    except ValueError as exc:
        raise CorruptFileError(f"{where} is not valid JSON: {exc}") from exc
    return None if data is None else kind.from_json(data, where)


PROCESS_GONE = "process gone"


def settle_run(record: RunRecord) -> RunRecord:
    """``record``, shown as failed ("process gone") when it says running but the process that ran
    it has ended (SIGKILL, OOM, power loss) on this host; the file is left as it is (`tracebank gc`
    writes the verdict). A run of another host stays running: its end cannot be seen from here."""
    if record.status != "running" or not record.owner:
        return record
    owner = Owner.parse(record.owner)
    if owner is None or owner.alive() is not False:  # an unreadable owner may still be running
        return record
    gone = f"{PROCESS_GONE}: pid {owner.pid} on {owner.host} ended without finishing the run"
    return dataclasses.replace(record, status="failed", error=gone)


#: The manifest that commits each kind of folder (:func:`tracebank.warehouse.layout.commit_folder_of`).
MANIFEST_KINDS: dict[str, type[Manifest]] = {
    "collection": CollectionManifest,
    "silver": SilverManifest,
    "dataset": DatasetManifest,
    "reward": RewardLayerManifest,
}


def _entry(path: Path, table_name: str, rows: int | None) -> FileEntry:
    return FileEntry(
        table=table_name, path=path.name, bytes=path.stat().st_size, sha256=sha256_file(path), rows=rows
    )


def _unreadable(path: Path, exc: BaseException) -> CorruptFileError:
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return CorruptFileError(
        f"unreadable Parquet file {path}: {first}", "restore it, or move its folder out of the warehouse"
    )


def read_table(
    paths: list[Path], columns: list[str] | None = None, schema: pa.Schema | None = None
) -> pa.Table:
    """Committed Parquet files as one table (cast to ``schema`` when given); a damaged file is named."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not paths:
        if schema is None:
            raise WarehouseError("no files to read")
        return schema.empty_table()
    tables = []
    for path in paths:
        try:
            table = pq.ParquetFile(path, page_checksum_verification=True).read(columns=columns)
        except (OSError, pa.ArrowException) as exc:
            raise _unreadable(path, exc) from exc
        tables.append(_as_schema(table, schema) if schema is not None else table)
    return pa.concat_tables(tables)


def _as_schema(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` cast to ``schema``; untouched when it already has those types (a cast imports
    ``pyarrow.compute``, a tenth of a warm transform's whole process)."""
    if table.schema.equals(schema, check_metadata=False):
        return table
    return table.cast(schema)


def iter_batches(paths: list[Path], columns: list[str], batch_size: int = 512) -> Iterator[pa.RecordBatch]:
    """The rows of committed Parquet files, batch by batch (memory: a few batches)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for path in paths:
        try:
            parquet = pq.ParquetFile(path, page_checksum_verification=True)
            yield from parquet.iter_batches(batch_size=batch_size, columns=columns)
        except (OSError, pa.ArrowException) as exc:
            raise _unreadable(path, exc) from exc


def parquet_scan_sql(path: Path, row_number: bool = False) -> str:
    """A DuckDB ``read_parquet(...)`` expression over one committed file."""
    quoted = str(path).replace("'", "''")
    return f"read_parquet('{quoted}'{', file_row_number = true' if row_number else ''})"


def encode_parquet(table: pa.Table, **options: Any) -> pa.Buffer:
    """``table`` as Parquet bytes in memory, to hash and commit with :meth:`Storage.write_buffer`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    options.setdefault("write_page_checksum", True)  # CRCs that the readers verify
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
    def store(self) -> ByteStore:
        return self.wh.store

    # -- the files of committed folders ------------------------------------------------------
    def read_manifest(self, folder: Path, kind: type[M]) -> M | None:
        """The committed, validated manifest of ``folder``; None when never committed."""
        return parse_manifest(self.store, self.wh.key(folder), kind)

    def files_of(self, folder: Path, manifest: Manifest, table: str | None = None) -> list[Path]:
        """Paths of the files ``manifest`` lists (of ``table`` only, when given), in commit order."""
        return self.entry_paths(folder, manifest.files_of(table))

    def entry_paths(self, folder: Path, entries: list[FileEntry]) -> list[Path]:
        """Local paths of the committed files ``entries`` of ``folder``, each present with its
        recorded size (a mirror downloads, and checks, the ones this machine has not read before)."""
        key = self.wh.key(folder)
        return [self.store.fetch(f"{key}/{e.path}", e.bytes, e.sha256) for e in entries]

    def unreadable(self, folder: Path, entry: FileEntry) -> str | None:
        """Why the committed file ``entry`` of ``folder`` cannot be read (it is gone, its size is not
        its manifest's, a mirror could not fetch it), or None. The cheap check every reader makes;
        `tracebank verify` hashes the content too (``verify._stored_damage``)."""
        try:
            self.entry_paths(folder, [entry])
        except CorruptFileError as exc:
            return exc.message
        return None

    def check_sizes(self, folder: Path, manifest: Manifest) -> None:
        """Cheap integrity check: every listed file exists with the recorded size."""
        self.entry_paths(folder, manifest.files)

    def verify_hashes(self, folder: Path, manifest: Manifest) -> None:
        """Full integrity check: sizes, then the sha256 of every listed file."""
        for path, entry in zip(self.entry_paths(folder, manifest.files), manifest.files, strict=True):
            if sha256_file(path) != entry.sha256:
                raise CorruptFileError(
                    f"committed file {path} does not match its sha256 in the manifest",
                    "the file was altered after commit; rebuild it",
                )

    # -- reading ---------------------------------------------------------------------------
    def _committed_under(self, parent: str, kind: type[M]) -> list[tuple[Path, M]]:
        """The committed folders directly under the key ``parent``, by name."""
        depth = parent.count("/") + 2
        folders = sorted(
            f.path.rpartition("/")[0]
            for f in self.store.walk(parent)
            if f.path.count("/") == depth and f.path.endswith(f"/{layout.MANIFEST}")
        )
        out = []
        for folder in folders:
            try:
                manifest = parse_manifest(self.store, folder, kind)
            except CorruptFileError as exc:  # hostile or damaged: hides its own commit only
                warn_damage(f"left out {folder}: {exc.one_line()}")
                continue
            if manifest is not None:
                out.append((self.wh.root / folder, manifest))
        return out

    def collections(self) -> list[tuple[Path, CollectionManifest]]:
        """Committed collections, oldest first (ids sort by time)."""
        return self._committed_under(layout.COLLECTIONS, CollectionManifest)

    def collection(self, collection_id: str) -> CollectionManifest | None:
        return parse_manifest(self.store, layout.collection_key(collection_id), CollectionManifest)

    def silver_caches(self) -> list[tuple[Path, SilverManifest]]:
        """Committed silver caches, one per collection they were derived from."""
        return self._committed_under(layout.SILVER, SilverManifest)

    def silver(self, collection_id: str) -> SilverManifest | None:
        return parse_manifest(self.store, layout.silver_key(collection_id), SilverManifest)

    def current_silver(self, collection_id: str) -> SilverManifest | None:
        """The committed silver cache of ``collection_id`` if this code's SILVER_VERSION built it."""
        manifest = self.silver(collection_id)
        if manifest is None or manifest.silver_version != SILVER_VERSION:
            return None
        return manifest

    def _current_silver_files(self, collection_id: str, table: str) -> list[Path]:
        manifest = self.current_silver(collection_id)
        if manifest is None:
            raise WarehouseError(f"silver cache of {collection_id} is missing or stale")
        return self.files_of(self.wh.silver_collection_dir(collection_id), manifest, table)

    def silver_batches(self, collection_id: str, table: str, columns: list[str]) -> Iterator[pa.RecordBatch]:
        """One table of a current silver cache, a few hundred rows at a time (memory: a batch)."""
        yield from iter_batches(self._current_silver_files(collection_id, table), columns, 256)

    def bronze_table(
        self, collection_id: str, manifest: CollectionManifest, table: str, columns: list[str]
    ) -> pa.Table:
        """``columns`` of bronze table ``table`` of the committed collection ``collection_id`` (its
        ``manifest``), read with the bronze schema's types, in commit order."""
        import pyarrow as pa
        from tracebank.warehouse import schemas

        files = self.files_of(self.wh.collection_dir(collection_id), manifest, table)
        schema = schemas.BRONZE[table]
        return read_table(files, columns=columns, schema=pa.schema([schema.field(c) for c in columns]))

    def silver_table(self, collection_id: str, table: str, columns: list[str] | None = None) -> pa.Table:
        """One table of a current silver cache (see :meth:`current_silver`; the caller checked it)."""
        from tracebank.warehouse import schemas

        try:
            files = self._current_silver_files(collection_id, table)
            if not files:
                return schemas.SILVER[table].empty_table().select(columns or schemas.SILVER[table].names)
            return read_table(files, columns=columns)
        except CorruptFileError as exc:  # a silver file deleted or damaged: it is a cache of bronze
            raise CorruptFileError(
                exc.message,
                f"rebuild it with `tracebank rebuild-silver --collection {collection_id}`",
            ) from exc

    def final_rewards(self, collection_id: str) -> dict[tuple[str, str], float]:
        """Each (rollout, attempt)'s collected final reward: its last valid reward by sequence, then
        time (rejected and empty rewards skipped). The silver cache is current (the caller checked)."""
        import polars as pl

        columns = ["rollout_id", "attempt_id", "sequence_id", "start_time", "value", "reject_reason"]
        rewards = pl.from_arrow(self.silver_table(collection_id, "rewards", columns))
        assert isinstance(rewards, pl.DataFrame)
        valid = rewards.filter(pl.col("reject_reason").is_null() & pl.col("value").is_not_null())
        last = (
            valid.sort(["sequence_id", "start_time"])
            .group_by("rollout_id", "attempt_id")
            .agg(pl.col("value").last())
        )
        return {(r, a): v for r, a, v in last.iter_rows()}

    def dataset_names(self) -> list[str]:
        names = self.store.children(layout.DATASETS)
        return [n for n in names if self.store.children(f"{layout.DATASETS}/{n}")]

    def dataset_versions(self, name: str | None = None) -> list[tuple[Path, DatasetManifest]]:
        """Committed dataset versions (of ``name``, or of every dataset), by name then version."""
        out: list[tuple[Path, DatasetManifest]] = []
        for n in [name] if name else self.dataset_names():
            for folder, manifest in self._committed_under(layout.dataset_key(n), DatasetManifest):
                if layout.version_number(folder.name) is not None:
                    out.append((folder, manifest))
        return out

    def next_version(self, name: str) -> int:
        """The next free version number of ``name`` (uncommitted folders count as taken)."""
        return commit.next_version(self.store, layout.dataset_key(name))

    def reward_layers(self, name: str | None = None) -> list[tuple[Path, RewardLayerManifest]]:
        """Committed reward layer versions (of ``name``, or of every layer), by name then version."""
        names = [name] if name else self.store.children(layout.REWARDS)
        out: list[tuple[Path, RewardLayerManifest]] = []
        for n in names:
            for folder, manifest in self._committed_under(layout.reward_layer_key(n), RewardLayerManifest):
                if layout.version_number(folder.name) is not None:
                    out.append((folder, manifest))
        return out

    def reward_scores(self, folder: Path, manifest: RewardLayerManifest) -> pa.Table:
        """The scores a committed reward layer holds (a layer written before the samples columns
        existed reads with them empty)."""
        from tracebank.warehouse import schemas

        table = read_table(self.files_of(folder, manifest))
        return schemas.conform(table, schemas.REWARD_SCORES).select(schemas.REWARD_SCORES.names)

    def run_ids(self) -> list[str]:
        """The ids of every run with a record, oldest first (ids sort by time)."""
        keys = (f.path.split("/") for f in self.store.walk(layout.RUNS))
        return [parts[1] for parts in keys if len(parts) == 3 and parts[2] == layout.RUN_RECORD]

    def read_run(self, run_id: str, settle: bool = True) -> RunRecord | None:
        """A run's record (``settle``: a running one whose process is gone shows as failed)."""
        key = f"{layout.run_key(run_id)}/{layout.RUN_RECORD}"
        try:
            data = commit.read_json(self.store, key)
        except ValueError as exc:
            raise CorruptFileError(f"{self.store.uri}/{key} is not valid JSON: {exc}") from exc
        if data is None:
            return None
        record = RunRecord.from_json(data, f"{self.store.uri}/{key}")
        return settle_run(record) if settle else record

    def runs(self) -> list[tuple[Path, RunRecord]]:
        """Every run record, oldest first; a run is visible from its start."""
        out = []
        for run_id in self.run_ids():
            try:
                record = self.read_run(run_id)
            except CorruptFileError as exc:
                warn_damage(f"left out run {run_id}: {exc.one_line()}")
                continue
            if record is not None:
                out.append((self.wh.run_dir(run_id), record))
        return out

    def run_metrics(self, folder: Path) -> list[dict[str, Any]]:
        """A run's metric events; a line being appended right now is skipped."""
        data = self.store.get(f"{self.wh.key(folder)}/{layout.RUN_METRICS}")
        events = []
        for line in (data or b"").decode("utf-8", "replace").split("\n"):
            try:
                # only shown and summarised: a NaN an older tracebank wrote reads as null
                event = finite.nulled(json.loads(line))
            except ValueError:
                continue
            if isinstance(event, dict):
                events.append(event)
        return events

    # -- writing data files ----------------------------------------------------------------
    def write_table(
        self, folder: Path, name: str, table: pa.Table, table_name: str, **options: Any
    ) -> FileEntry:
        """Write ``table`` as ``folder/name`` (not yet visible: no manifest lists it)."""
        import pyarrow.parquet as pq

        options.setdefault("compression", "zstd")
        options.setdefault("write_page_checksum", True)  # CRCs that the readers verify
        path = self.wh.path(f"{self.wh.key(folder)}/{name}")
        with atomic_path(path) as tmp:
            pq.write_table(table, tmp, **options)
        return _entry(path, table_name, table.num_rows)

    def write_buffer(self, folder: Path, name: str, data: Any, rows: int, table_name: str) -> FileEntry:
        """Write Parquet bytes already in memory as ``folder/name``, hashed from memory."""
        view = memoryview(data)
        with atomic_path(self.wh.path(f"{self.wh.key(folder)}/{name}")) as tmp, open(tmp, "wb") as fh:
            fh.write(view)
        sha = hashlib.sha256(view).hexdigest()
        return FileEntry(table=table_name, path=name, bytes=view.nbytes, sha256=sha, rows=rows)

    @contextlib.contextmanager
    def parquet_stream(
        self, folder: Path, name: str, table_name: str, schema: pa.Schema, **options: Any
    ) -> Iterator[ParquetStream]:
        """Write ``folder/name`` a table at a time (not yet visible: no manifest lists it).

        The file is hashed as it is written and renamed into place when the block
        ends without an error; ``stream.entry`` is then its manifest entry.
        """
        import pyarrow.parquet as pq

        options.setdefault("write_page_checksum", True)  # CRCs that the readers verify
        with atomic_path(self.wh.path(f"{self.wh.key(folder)}/{name}")) as tmp, open(tmp, "wb") as fh:
            sink = _HashingFile(fh)
            stream = ParquetStream(pq.ParquetWriter(sink, schema, **options), table_name)
            try:
                yield stream
            finally:
                stream.writer.close()
        stream.entry = FileEntry(
            table=table_name, path=name, bytes=sink.size, sha256=sink.sha.hexdigest(), rows=stream.rows
        )

    # -- transitions -----------------------------------------------------------------------
    def commit_collection(self, folder: Path, manifest: CollectionManifest) -> Path:
        """Make a collection visible: its manifest, written last (a second commit of it fails)."""
        commit.commit_folder(self.store, self.wh.key(folder), manifest, exclusive=True)
        return folder / layout.MANIFEST

    def retire_collection(self, folder: Path) -> None:
        """Make a collection invisible (its manifest goes); its files, and its silver cache, stay
        for readers that planned against them until `tracebank gc` removes them."""
        commit.retire(self.store, self.wh.key(folder))

    def reserve_version(self, name: str) -> tuple[int, Path]:
        """Claim the next free version folder of ``name`` (a concurrent writer gets another)."""
        owner = Owner.current(f"transform {name}")
        version = commit.reserve_version(self.store, layout.dataset_key(name), owner)
        folder = self.wh.version_dir(name, version)
        folder.mkdir(parents=True, exist_ok=True)
        return version, folder

    def commit_version(self, folder: Path, manifest: DatasetManifest) -> Path:
        """Make a reserved dataset version visible (immutable from now on)."""
        if layout.version_number(folder.name) != manifest.version or folder.parent.name != manifest.name:
            raise WarehouseError(
                f"manifest of {manifest.name}@v{manifest.version} does not belong in {folder}"
            )
        commit.commit_folder(self.store, self.wh.key(folder), manifest, exclusive=True)
        return folder / layout.MANIFEST

    def abandon_version(self, folder: Path) -> None:
        """Drop a reserved version (of a dataset or a reward layer) that failed before its commit."""
        commit.release_version(self.store, self.wh.key(folder))

    def reserve_reward_layer(self, name: str) -> tuple[int, Path]:
        """Claim the next free version folder of reward layer ``name`` (abandon with abandon_version)."""
        owner = Owner.current(f"rescore {name}")
        version = commit.reserve_version(self.store, layout.reward_layer_key(name), owner)
        folder = self.wh.path(layout.reward_version_key(name, version))
        folder.mkdir(parents=True, exist_ok=True)
        return version, folder

    def commit_reward_layer(self, folder: Path, manifest: RewardLayerManifest) -> Path:
        """Make a reserved reward layer version visible (immutable from now on)."""
        if self.wh.key(folder) != layout.reward_version_key(manifest.name, manifest.version):
            raise WarehouseError(
                f"manifest of reward layer {manifest.name}@v{manifest.version} does not belong in {folder}"
            )
        commit.commit_folder(self.store, self.wh.key(folder), manifest, exclusive=True)
        return folder / layout.MANIFEST

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
                                layout.silver_file(name, build),
                                name,
                                table.schema,
                                **(options(table) if options else {}),
                            )
                        )
                    streams[name].write(table, (row_groups or {}).get(name))
        manifest: SilverManifest = make([s.entry for s in streams.values()])
        commit.commit_folder(self.store, self.wh.key(folder), manifest, exclusive=False)
        return manifest

    def start_run(self, record: RunRecord) -> Path:
        """Create a run's record (its id must be new) and an empty metrics file."""
        key = layout.run_key(record.run_id)
        if not self.store.create_exclusive(f"{key}/{layout.RUN_RECORD}", _record_bytes(record)):
            raise WarehouseError(f"run {record.run_id} already exists in {self.wh.location}")
        self.store.put(f"{key}/{layout.RUN_METRICS}", b"")
        return self.wh.root / key

    def write_run(self, record: RunRecord) -> None:
        """Replace a run's record whole: readers see the previous or the next state."""
        key = layout.run_key(record.run_id)
        if self.wh.path(f"{key}/{layout.RUN_METRICS}").is_file():
            self.store.publish(f"{key}/{layout.RUN_METRICS}")  # so a record never points at fewer metrics
        self.store.put(f"{key}/{layout.RUN_RECORD}", _record_bytes(record))

    def append_metric(self, run_id: str, event: dict[str, Any]) -> None:
        """Append one metric event (a line) to a run's metrics.jsonl (published every few seconds)."""
        key = f"{layout.run_key(run_id)}/{layout.RUN_METRICS}"
        path = self.wh.path(key)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(finite.json_line(event, sort_keys=True) + "\n")
            fh.flush()
        if self._push_due(key):
            self.store.publish(key)

    def _push_due(self, key: str) -> bool:
        """Whether ``key`` was last published over METRICS_PUSH_S ago (the run record's updates
        publish it too, so nothing is left behind when a run ends)."""
        now = time.monotonic()
        if now - self.wh.published.get(key, 0.0) < METRICS_PUSH_S:
            return False
        self.wh.published[key] = now
        return True


def _record_bytes(record: RunRecord) -> bytes:
    return commit.record_bytes(record.to_json(), f"run record {record.run_id}")
