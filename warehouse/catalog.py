"""The catalog: committed collections, silver caches, dataset versions and runs.

Everything here is derived from manifests on disk; there is no catalog
database to keep in sync.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracebank.warehouse.commit import read_manifest
from tracebank.warehouse.errors import CorruptFileError, NotFoundError, UsageError
from tracebank.warehouse.layout import Warehouse, validate_name

_REF_RE = re.compile(r"^(?P<name>[^@]+)(?:@v?(?P<version>\d+))?$")


@dataclass(frozen=True)
class DatasetRef:
    """``NAME`` (latest version) or ``NAME@vN``."""

    name: str
    version: int | None = None

    @classmethod
    def parse(cls, text: str) -> DatasetRef:
        m = _REF_RE.match(text.strip())
        if not m:
            raise UsageError(f"invalid dataset reference {text!r}", "use NAME or NAME@vN")
        version = int(m["version"]) if m["version"] else None
        if version is not None and version < 1:
            raise UsageError(f"invalid dataset version in {text!r}", "versions start at v1")
        return cls(validate_name(m["name"], "dataset name"), version)

    def __str__(self) -> str:
        return self.name if self.version is None else f"{self.name}@v{self.version}"


def _committed(folders: list[Path]) -> list[tuple[Path, dict[str, Any]]]:
    out = []
    for folder in sorted(folders):
        manifest = read_manifest(folder)
        if manifest is not None:
            out.append((folder, manifest))
    return out


def _subdirs(path: Path) -> list[Path]:
    return [p for p in path.iterdir() if p.is_dir()] if path.exists() else []


def collections(wh: Warehouse) -> list[tuple[Path, dict[str, Any]]]:
    """Committed collections, oldest first (ids sort by time)."""
    return _committed(_subdirs(wh.collections_dir))


def silver_caches(wh: Warehouse) -> list[tuple[Path, dict[str, Any]]]:
    """Committed silver caches, one per collection they were derived from."""
    return _committed(_subdirs(wh.silver_dir))


def dataset_names(wh: Warehouse) -> list[str]:
    return sorted(p.name for p in _subdirs(wh.datasets_dir))


def dataset_versions(wh: Warehouse, name: str | None = None) -> list[tuple[Path, dict[str, Any]]]:
    """Committed dataset versions (of ``name``, or of every dataset), by name then version."""
    names = [name] if name else dataset_names(wh)
    out: list[tuple[Path, dict[str, Any]]] = []
    for n in names:
        out.extend(_committed([p for p in _subdirs(wh.dataset_dir(n)) if p.name.startswith("v")]))
    return out


def version_number(folder: Path) -> int:
    return int(folder.name.lstrip("v"))


def next_version(wh: Warehouse, name: str) -> int:
    """The next free version number of ``name`` (uncommitted folders count as taken)."""
    taken = [version_number(p) for p in _subdirs(wh.dataset_dir(name)) if p.name[1:].isdigit()]
    return max(taken, default=0) + 1


def resolve_dataset(wh: Warehouse, ref: DatasetRef | str) -> tuple[DatasetRef, Path, dict[str, Any]]:
    """The committed version ``ref`` names (latest when unversioned), with folder and manifest."""
    ref = DatasetRef.parse(ref) if isinstance(ref, str) else ref
    versions = dataset_versions(wh, ref.name)
    if not versions:
        known = ", ".join(dataset_names(wh)) or "none yet"
        raise NotFoundError(
            f"no dataset named {ref.name!r} in {wh.root}",
            f"known datasets: {known}; build one with `tracebank transform --name {ref.name}`",
        )
    if ref.version is None:
        folder, manifest = versions[-1]
        return DatasetRef(ref.name, version_number(folder)), folder, manifest
    for folder, manifest in versions:
        if version_number(folder) == ref.version:
            return ref, folder, manifest
    have = ", ".join(f"v{version_number(f)}" for f, _ in versions)
    raise NotFoundError(f"dataset {ref} does not exist", f"{ref.name} has versions {have}")


def runs(wh: Warehouse) -> list[tuple[Path, dict[str, Any]]]:
    """Every run record (run.json), oldest first; a run is visible from its start."""
    out = []
    for folder in sorted(_subdirs(wh.runs_dir)):
        path = folder / "run.json"
        if path.exists():
            try:
                out.append((folder, json.loads(path.read_text())))
            except ValueError as exc:
                raise CorruptFileError(f"run record {path} is not valid JSON: {exc}") from exc
    return out


def resolve_run(wh: Warehouse, run_id: str) -> tuple[Path, dict[str, Any]]:
    for folder, record in runs(wh):
        if folder.name == run_id:
            return folder, record
    matches = [(f, r) for f, r in runs(wh) if f.name.startswith(run_id)]
    if len(matches) == 1:
        return matches[0]
    raise NotFoundError(f"no run {run_id!r} in {wh.root}", "see `tracebank runs list`")
