"""A committed dataset version as an object: what ``Warehouse.transform`` built or
``Warehouse.dataset("NAME@vN")`` names, readable as Arrow, Polars or a Hugging Face dataset."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracebank.warehouse.catalog import DatasetRef, resolve_dataset
from tracebank.warehouse.records import DatasetManifest
from tracebank.warehouse.storage import Storage, read_table

if TYPE_CHECKING:
    import datasets as hf
    import polars as pl
    import pyarrow as pa

    from tracebank.warehouse.location import Warehouse


@dataclass(frozen=True)
class Dataset:
    """One immutable dataset version: its name, version, content hash, counts and rows."""

    ref: DatasetRef
    """``NAME@vN``, its version always given."""
    folder: Path
    """The version's folder in this machine's working folder of the warehouse."""
    record: DatasetManifest
    """The committed manifest, checked when it was read."""
    storage: Storage
    """The warehouse's reader of committed files (a mirror fetches a file when first read)."""
    identical: bool = False
    """``transform`` wrote nothing: an existing version has this content hash (``force`` writes one)."""

    @classmethod
    def open(cls, wh: Warehouse, ref: str | DatasetRef) -> Dataset:
        """The committed version ``ref`` names (``NAME`` is the latest)."""
        resolved, folder, record = resolve_dataset(wh, ref)
        return cls(resolved, folder, record, Storage(wh))

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def version(self) -> int:
        return self.record.version

    @property
    def hash(self) -> str:
        """The content hash: the same rows from the same sources give the same hash."""
        return self.record.content_hash

    @property
    def counts(self) -> dict[str, Any]:
        """What building it counted: calls used, rejected, dropped, selected..."""
        return self.record.counts

    @property
    def rows(self) -> int:
        return self.record.rows

    @property
    def manifest(self) -> dict[str, Any]:
        """The manifest as committed (its JSON form)."""
        return self.record.to_json()

    @property
    def splits(self) -> list[str]:
        """The splits it holds, ``train`` first."""
        return list(self.record.split_files())

    def files(self, split: str = "train") -> list[Path]:
        """The local paths of a split's files, in manifest order (fetched and checked by size)."""
        entries = self.record.split_files().get(split)
        if entries is None:
            from tracebank.core.errors import UsageError

            raise UsageError(f"{self.ref} has no split {split!r}", f"it has {', '.join(self.splits)}")
        return self.storage.entry_paths(self.folder, entries)

    def to_arrow(self, split: str = "train") -> pa.Table:
        """A split's rows as one ``pyarrow.Table`` (a damaged file is named)."""
        return read_table(self.files(split))

    def to_polars(self, split: str = "train") -> pl.DataFrame:
        """A split's rows as a ``polars.DataFrame``."""
        import polars as pl

        frame = pl.from_arrow(self.to_arrow(split))
        assert isinstance(frame, pl.DataFrame)
        return frame

    def to_hf(self, split: str | None = "train") -> hf.Dataset | hf.DatasetDict:
        """A split as a Hugging Face ``datasets.Dataset``; ``split=None``: every split, a ``DatasetDict``."""
        import datasets as hf

        if split is not None:
            return hf.Dataset(self.to_arrow(split))
        return hf.DatasetDict({name: hf.Dataset(self.to_arrow(name)) for name in self.splits})

    def summary(self) -> str:
        """The line ``tracebank transform`` prints."""
        from tracebank.transform.manifest import identical_line, summary_line

        return identical_line(str(self.ref), self.hash) if self.identical else summary_line(self.manifest)

    def __str__(self) -> str:
        return str(self.ref)
