"""A committed dataset version as the trainer sees it: its files per split, their checks, their stats.

The parent process resolves and verifies the version and computes what the pre-flight
checks need with pyarrow alone (no torch). The child process loads the same files into a
`datasets.Dataset` backed by a memory-mapped Arrow file, keeping only the three columns
the model consumes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracebank.train.errors import TrainError
from tracebank.warehouse import catalog
from tracebank.warehouse.catalog import DatasetRef
from tracebank.warehouse.contract import IGNORE_INDEX
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.records import DatasetManifest
from tracebank.warehouse.storage import Storage, iter_batches, read_table

MODEL_COLUMNS = ["input_ids", "attention_mask", "labels"]


@dataclass(frozen=True)
class DatasetVersion:
    """One committed version: where its files are and what its manifest says."""

    ref: DatasetRef
    folder: Path
    record: DatasetManifest
    storage: Storage

    @property
    def manifest(self) -> dict[str, Any]:
        """The manifest as committed (its JSON form)."""
        return self.record.to_json()

    @property
    def label(self) -> str:
        return f"{self.ref.name}@v{self.ref.version}"

    @property
    def content_hash(self) -> str | None:
        return self.record.content_hash

    def split_files(self) -> dict[str, list[Path]]:
        """Data files per split (``train``, ``validation``...), in manifest order."""
        return {
            split: self.storage.entry_paths(self.folder, entries)
            for split, entries in self.record.split_files().items()
        }

    def split_rows(self) -> dict[str, int]:
        return {
            split: sum(e.rows or 0 for e in entries) for split, entries in self.record.split_files().items()
        }


def open_version(wh: Warehouse, ref: str | DatasetRef) -> DatasetVersion:
    """Resolve ``NAME[@vN]`` (latest when unversioned) to a committed version with a train split."""
    resolved, folder, manifest = catalog.resolve_dataset(wh, ref)
    version = DatasetVersion(resolved, folder, manifest, Storage(wh))
    if not version.split_files().get("train"):
        raise TrainError(
            f"dataset {version.label} has no train split", "its manifest lists no file with split 'train'"
        )
    return version


def verify(version: DatasetVersion) -> None:
    """Check every file's size and sha256 against the manifest (raises CorruptFileError)."""
    version.storage.verify_hashes(version.folder, version.record)


@dataclass
class SplitScan:
    """Per-row facts of one split, computed from its Parquet files."""

    rows: int
    lengths: list[int]
    #: index of each row's first trained token (len(row) when it has none)
    first_trained: list[int]
    max_token_id: int
    min_token_id: int
    trained_tokens: int


def scan_split(paths: list[Path]) -> SplitScan:
    """Row lengths, first trained position and token-id range of a split (pyarrow + numpy only)."""
    import numpy as np
    import pyarrow.compute as pc

    table = read_table(paths, columns=["input_ids", "labels"])
    if table.num_rows == 0:
        return SplitScan(0, [], [], -1, 0, 0)
    ids = table.column("input_ids").combine_chunks()
    labels = table.column("labels").combine_chunks()
    lengths = pc.list_value_length(ids).to_numpy(zero_copy_only=False)
    label_lengths = pc.list_value_length(labels).to_numpy(zero_copy_only=False)
    if not np.array_equal(lengths, label_lengths):
        bad = int(np.nonzero(lengths != label_lengths)[0][0])
        raise TrainError(
            f"row {bad} has {lengths[bad]} input ids but {label_lengths[bad]} labels",
            "the dataset is malformed; rebuild it with `tracebank transform`",
        )
    flat_ids = pc.list_flatten(ids).to_numpy(zero_copy_only=False)
    flat_labels = pc.list_flatten(labels).to_numpy(zero_copy_only=False)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    parents = np.repeat(np.arange(len(lengths)), lengths)
    position = np.arange(len(flat_labels)) - offsets[parents]
    trained = flat_labels != IGNORE_INDEX
    first = lengths.astype(np.int64).copy()
    np.minimum.at(first, parents[trained], position[trained])
    return SplitScan(
        rows=table.num_rows,
        lengths=lengths.astype(int).tolist(),
        first_trained=first.astype(int).tolist(),
        max_token_id=int(flat_ids.max()) if len(flat_ids) else -1,
        min_token_id=int(flat_ids.min()) if len(flat_ids) else 0,
        trained_tokens=int(trained.sum()),
    )


def scan_preference_split(paths: list[Path]) -> SplitScan:
    """The facts the pre-flight checks need, for pairs: a pair's length is its prompt plus its longer
    answer, and every pair trains from its first answer token."""
    table = read_table(paths, columns=["prompt_input_ids", "chosen_input_ids", "rejected_input_ids"])
    prompts, chosen, rejected = (table.column(c).to_pylist() for c in table.column_names)
    lengths = [len(p) + max(len(c), len(r)) for p, c, r in zip(prompts, chosen, rejected, strict=True)]
    ids = [i for rows in (prompts, chosen, rejected) for row in rows for i in row]
    return SplitScan(
        rows=table.num_rows,
        lengths=lengths,
        first_trained=[len(p) for p in prompts],
        max_token_id=max(ids, default=-1),
        min_token_id=min(ids, default=0),
        trained_tokens=sum(len(c) + len(r) for c, r in zip(chosen, rejected, strict=True)),
    )


def load_split(paths: list[Path], cache_dir: Path, keep_rows: list[int] | None = None) -> Any:
    """A `datasets.Dataset` over ``paths`` backed by a memory-mapped Arrow file in ``cache_dir``.

    The Parquet files are decoded batch by batch into one Arrow stream file, so peak memory
    is a few batches, not the split (``Dataset.from_parquet`` decodes whole row groups and
    kept about 3x more resident in the bench). Only input_ids, attention_mask and labels
    are read; reward and provenance columns stay on disk.
    """
    import pyarrow as pa
    from datasets import Dataset

    cache_dir.mkdir(parents=True, exist_ok=True)
    target = cache_dir / f"{paths[0].parent.name}-{paths[0].stem}-{len(paths)}.arrow"
    schema = pa.schema([(name, pa.list_(pa.int32())) for name in MODEL_COLUMNS])
    with pa.OSFile(str(target), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
        for batch in iter_batches(paths, MODEL_COLUMNS, batch_size=512):
            writer.write_batch(batch.cast(schema) if batch.schema != schema else batch)
    dataset = Dataset.from_file(str(target), in_memory=False)
    if keep_rows is not None:
        dataset = dataset.select(keep_rows)  # an index mapping, no copy
    return dataset
