"""Where everything lives inside a warehouse folder.

WAREHOUSE/
  FORMAT.json                         format name and version
  collections/<collection_id>/        bronze: one collect run
    rollouts-0000.parquet attempts-0000.parquet spans-0000.parquet
    manifest.json                     written last: the commit
  silver/<collection_id>/             llm_calls, rewards, messages (+ manifest)
  datasets/<name>/v0001/              gold: one immutable dataset version
    train.parquet [validation.parquet] manifest.json
  runs/<run_id>/run.json metrics.jsonl
  tmp/                                scratch; never read

A warehouse on object storage (``s3://bucket/prefix``) has the same layout under its
prefix; this machine works in a local mirror of it (:func:`mirror_folder`), which holds
only committed folders, each verified against its manifest (see ``warehouse.mirror``).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracebank.warehouse.errors import UsageError, WarehouseError

FORMAT_NAME = "tracebank-warehouse"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
ENV_VAR = "TRACEBANK_WAREHOUSE"
#: Moves tracebank's cache folder (default ``~/.cache/tracebank``): built environments, mirrors.
CACHE_VARIABLE = "TRACEBANK_CACHE_DIR"


def cache_dir() -> Path:
    """tracebank's cache folder: ``$TRACEBANK_CACHE_DIR`` or ``~/.cache/tracebank``."""
    return Path(os.environ.get(CACHE_VARIABLE) or Path.home() / ".cache" / "tracebank").expanduser()


def mirror_folder(uri: str) -> Path:
    """Where this machine mirrors the remote warehouse ``uri`` (one folder per location)."""
    scheme, _, rest = uri.partition("://")
    parts = [validate_name(p, "warehouse location part") for p in rest.strip("/").split("/") if p]
    return cache_dir().joinpath("warehouses", scheme, *parts)


_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def validate_name(name: str, what: str = "name") -> str:
    """Return ``name`` if it is safe as a folder name, else raise UsageError."""
    if not _NAME_RE.match(name) or name in {".", ".."}:
        raise UsageError(
            f"invalid {what} {name!r}",
            "use letters, digits, '.', '_' or '-', starting with a letter or digit",
        )
    return name


@dataclass(frozen=True)
class Warehouse:
    """A warehouse folder; all paths inside it come from here.

    For a warehouse on object storage, ``root`` is this machine's mirror of it and ``remote``
    the store that holds the committed truth (:class:`~tracebank.warehouse.objectstore.ObjectStore`).
    """

    root: Path
    remote: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def resolve(cls, path: str | os.PathLike[str] | None = None) -> Warehouse:
        """``path``, else ``$TRACEBANK_WAREHOUSE``, else ``./warehouse``; ``s3://...`` is remote."""
        from tracebank.warehouse.objectstore import LocalStore, open_store

        chosen = str(path or os.environ.get(ENV_VAR) or "warehouse")
        store = open_store(chosen)
        if isinstance(store, LocalStore):
            return cls(store.root)
        from tracebank.warehouse.mirror import register

        wh = cls(mirror_folder(store.uri), store)
        register(wh)
        return wh

    @property
    def location(self) -> str:
        """Where the warehouse is, as a user names it (a folder, or ``s3://bucket/prefix``)."""
        return self.remote.uri if self.remote is not None else str(self.root)

    @property
    def format_file(self) -> Path:
        return self.root / "FORMAT.json"

    @property
    def collections_dir(self) -> Path:
        return self.root / "collections"

    @property
    def silver_dir(self) -> Path:
        return self.root / "silver"

    @property
    def datasets_dir(self) -> Path:
        return self.root / "datasets"

    @property
    def runs_dir(self) -> Path:
        return self.root / "runs"

    @property
    def tmp_dir(self) -> Path:
        return self.root / "tmp"

    def collection_dir(self, collection_id: str) -> Path:
        return self.collections_dir / validate_name(collection_id, "collection id")

    def silver_collection_dir(self, collection_id: str) -> Path:
        return self.silver_dir / validate_name(collection_id, "collection id")

    def dataset_dir(self, name: str) -> Path:
        return self.datasets_dir / validate_name(name, "dataset name")

    def version_dir(self, name: str, version: int) -> Path:
        return self.dataset_dir(name) / f"v{version:04d}"

    def run_dir(self, run_id: str) -> Path:
        return self.runs_dir / validate_name(run_id, "run id")

    def exists(self) -> bool:
        return self._has_format()

    def _has_format(self) -> bool:
        """Whether FORMAT.json is here (a mirror copies it from its store the first time)."""
        if self.remote is not None and not self.format_file.exists():
            from tracebank.warehouse.mirror import fetch_format

            return fetch_format(self)
        return self.format_file.exists()

    def init(self) -> Warehouse:
        """Create the folder layout (idempotent) and check its format version."""
        from tracebank.warehouse.commit import write_json_atomic

        if self.root.exists() and not self.root.is_dir():
            raise WarehouseError(f"warehouse path {self.root} is a file, not a folder")
        if (self.root / "__init__.py").exists():
            raise WarehouseError(
                f"{self.root} is a Python package, not a warehouse",
                "pass --warehouse DIR or set TRACEBANK_WAREHOUSE (running from the source tree?)",
            )
        for d in (self.collections_dir, self.silver_dir, self.datasets_dir, self.runs_dir, self.tmp_dir):
            d.mkdir(parents=True, exist_ok=True)
        if self.remote is not None:
            from tracebank.warehouse.mirror import init_remote

            init_remote(self)
        if not self.format_file.exists():
            write_json_atomic(self.format_file, {"format": FORMAT_NAME, "version": FORMAT_VERSION})
        self.check_format()
        return self

    def check_format(self) -> None:
        """Raise WarehouseError unless this folder is a warehouse this version can read."""
        if not self._has_format():
            raise WarehouseError(
                f"no warehouse at {self.location}",
                "run `tracebank collect` first, or pass --warehouse / set TRACEBANK_WAREHOUSE",
            )
        try:
            fmt = json.loads(self.format_file.read_text())
        except (OSError, ValueError) as exc:
            raise WarehouseError(f"unreadable {self.format_file}: {exc}") from exc
        if fmt.get("format") != FORMAT_NAME:
            raise WarehouseError(f"{self.location} is not a tracebank warehouse")
        if int(fmt.get("version", 0)) > FORMAT_VERSION:
            raise WarehouseError(
                f"warehouse format v{fmt.get('version')} is newer than this tracebank "
                f"(reads up to v{FORMAT_VERSION})",
                "upgrade tracebank",
            )
