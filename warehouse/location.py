"""Where a warehouse is: the store that holds it and the local folder this machine works in.

Choosing the store (a folder, or a bucket through its mirror) is :mod:`tracebank.warehouse.backends`'
job, above the commit protocol; this handle only carries the one it was given. A
:class:`Warehouse` names every path inside its working folder (names from
:mod:`tracebank.warehouse.layout`) and carries its :class:`~tracebank.warehouse.bytestore.ByteStore`:
the folder itself for a local warehouse, a mirror of the bucket for one on object storage.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from tracebank.core.errors import WarehouseError
from tracebank.warehouse import layout
from tracebank.warehouse.atomic import json_bytes, write_bytes_atomic
from tracebank.warehouse.bytestore import ByteStore, LocalStore, refuse_linked_folders


@dataclass(frozen=True)
class Warehouse:
    """A warehouse: its store and the paths of its working folder (``root``)."""

    root: Path
    """The working folder on this machine: the warehouse itself, or the mirror of a bucket."""
    store: ByteStore = field(default=None, compare=False, repr=False)  # type: ignore[assignment]
    """Where the bytes are: the folder itself, or a bucket (choosing one is ``backends``')."""
    published: dict[str, float] = field(default_factory=dict, compare=False, repr=False)
    """When each growing file (a run's metrics) last went up to the store, by key."""

    def __post_init__(self) -> None:
        if self.store is None:
            object.__setattr__(self, "store", LocalStore(self.root))

    @property
    def location(self) -> str:
        """Where the warehouse is, as a user names it (a folder, or ``s3://bucket/prefix``)."""
        return self.store.uri

    def key(self, path: Path) -> str:
        """The store key of ``path`` inside the working folder."""
        return path.relative_to(self.root).as_posix()

    def path(self, key: str) -> Path:
        return self.store.local_path(key)

    @property
    def format_file(self) -> Path:
        return self.root / layout.FORMAT

    @property
    def collections_dir(self) -> Path:
        return self.root / layout.COLLECTIONS

    @property
    def silver_dir(self) -> Path:
        return self.root / layout.SILVER

    @property
    def datasets_dir(self) -> Path:
        return self.root / layout.DATASETS

    @property
    def runs_dir(self) -> Path:
        return self.root / layout.RUNS

    @property
    def tmp_dir(self) -> Path:
        return self.root / layout.TMP

    def collection_dir(self, collection_id: str) -> Path:
        return self.root / layout.collection_key(collection_id)

    def silver_collection_dir(self, collection_id: str) -> Path:
        return self.root / layout.silver_key(collection_id)

    def dataset_dir(self, name: str) -> Path:
        return self.root / layout.dataset_key(name)

    def version_dir(self, name: str, version: int) -> Path:
        return self.root / layout.version_key(name, version)

    def run_dir(self, run_id: str) -> Path:
        return self.root / layout.run_key(run_id)

    # -- the format file --------------------------------------------------------------------
    def _format(self) -> bytes | None:
        """The format file's bytes; a working folder keeps a copy (the format never changes)."""
        if self.format_file.is_file():
            return self.format_file.read_bytes()
        data = self.store.get(layout.FORMAT)
        if data is not None:
            write_bytes_atomic(self.format_file, data)
        return data

    def exists(self) -> bool:
        return self._format() is not None

    def init(self) -> Warehouse:
        """Create the folder layout (idempotent) and check its format version."""
        if self.root.exists() and not self.root.is_dir():
            raise WarehouseError(f"warehouse path {self.root} is a file, not a folder")
        if (self.root / "__init__.py").exists():
            raise WarehouseError(
                f"{self.root} is a Python package, not a warehouse",
                "pass --warehouse DIR or set TRACEBANK_WAREHOUSE (running from the source tree?)",
            )
        for name in layout.TOP_FOLDERS:
            (self.root / name).mkdir(parents=True, exist_ok=True)
        if not self.format_file.exists():  # two first writers race safely: one creates it
            fmt = {"format": layout.FORMAT_NAME, "version": layout.FORMAT_VERSION}
            self.store.create_exclusive(layout.FORMAT, json_bytes(fmt))
        self.check_format()
        return self

    def check_format(self) -> None:
        """Raise WarehouseError unless this is a warehouse this version can read."""
        data = self._format()
        if data is None:
            raise WarehouseError(
                f"no warehouse at {self.location}",
                "run `tracebank collect` first, or pass --warehouse / set TRACEBANK_WAREHOUSE",
            )
        try:
            fmt = json.loads(data)
        except ValueError as exc:
            raise WarehouseError(f"unreadable {self.location}/{layout.FORMAT}: {exc}") from exc
        if not isinstance(fmt, dict) or fmt.get("format") != layout.FORMAT_NAME:
            raise WarehouseError(f"{self.location} is not a tracebank warehouse")
        version = fmt.get("version", 0)
        if not isinstance(version, int) or version > layout.FORMAT_VERSION:
            raise WarehouseError(
                f"warehouse format v{version} is newer than this tracebank "
                f"(reads up to v{layout.FORMAT_VERSION})",
                "upgrade tracebank",
            )
        # A co-worker who can write a shared folder could point a top-level folder anywhere: every
        # command refuses it here, once, rather than reading or writing through it.
        refuse_linked_folders(self.root, layout.WAREHOUSE_FOLDERS)
