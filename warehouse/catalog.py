"""The catalog: committed collections, silver caches, dataset versions and runs, by name.

Everything here is derived from manifests on disk (read and validated by
:class:`~tracebank.warehouse.storage.Storage`); there is no catalog database to keep in sync.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tracebank.core.errors import NotFoundError, UsageError
from tracebank.warehouse import layout
from tracebank.warehouse.layout import validate_name
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.records import (
    DatasetManifest,
    RewardLayerManifest,
    RunRecord,
)
from tracebank.warehouse.storage import Storage

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


def version_number(folder: Path) -> int:
    """``datasets/<name>/v0003`` -> 3."""
    return layout.version_number(folder.name) or 0


def resolve_dataset(wh: Warehouse, ref: DatasetRef | str) -> tuple[DatasetRef, Path, DatasetManifest]:
    """The committed version ``ref`` names (latest when unversioned), with folder and manifest."""
    ref = DatasetRef.parse(ref) if isinstance(ref, str) else ref
    storage = Storage(wh)
    versions = storage.dataset_versions(ref.name)
    if not versions:
        known = ", ".join(storage.dataset_names()) or "none yet"
        raise NotFoundError(
            f"no dataset named {ref.name!r} in {wh.root}",
            f"known datasets: {known}; build one with `tracebank transform --dataset {ref.name}`",
        )
    if ref.version is None:
        folder, manifest = versions[-1]
        return DatasetRef(ref.name, version_number(folder)), folder, manifest
    for folder, manifest in versions:
        if version_number(folder) == ref.version:
            return ref, folder, manifest
    have = ", ".join(f"v{version_number(f)}" for f, _ in versions)
    raise NotFoundError(f"dataset {ref} does not exist", f"{ref.name} has versions {have}")


def resolve_reward_layer(wh: Warehouse, ref: str) -> tuple[str, Path, RewardLayerManifest]:
    """The committed reward layer ``NAME[@vN]`` names (latest when unversioned), with folder and manifest."""
    m = _REF_RE.match(ref.strip())
    if not m:
        raise UsageError(f"invalid reward layer reference {ref!r}", "use NAME or NAME@vN")
    name = validate_name(m["name"], "reward layer name")
    versions = Storage(wh).reward_layers(name)
    if not versions:
        raise NotFoundError(
            f"no reward layer named {name!r} in {wh.root}",
            f"score the rollouts first: `tracebank rescore --scorer MODULE:FUNCTION --name {name}`",
        )
    wanted = int(m["version"]) if m["version"] else version_number(versions[-1][0])
    for folder, manifest in versions:
        if version_number(folder) == wanted:
            return f"{name}@v{wanted}", folder, manifest
    have = ", ".join(f"v{version_number(f)}" for f, _ in versions)
    raise NotFoundError(f"reward layer {name}@v{wanted} does not exist", f"{name} has versions {have}")


def resolve_run(wh: Warehouse, run_id: str) -> tuple[Path, RunRecord]:
    runs = Storage(wh).runs()
    for folder, record in runs:
        if folder.name == run_id:
            return folder, record
    matches = [(f, r) for f, r in runs if f.name.startswith(run_id)]
    if len(matches) == 1:
        return matches[0]
    raise NotFoundError(f"no run {run_id!r} in {wh.root}", "see `tracebank runs list`")
