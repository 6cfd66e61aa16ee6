"""`tracebank verify`: check every committed file against its manifest, like `git fsck`.

Each file a committed manifest lists must exist with the recorded size and sha256. A manifest
that is not valid JSON or not of a manifest's shape, and a run record that is not valid JSON,
are damage too. Reported: every damaged path with what is wrong; nothing is changed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from tracebank.warehouse.commit import sha256_file
from tracebank.warehouse.errors import CorruptFileError
from tracebank.warehouse.gc import commit_folders
from tracebank.warehouse.layout import MANIFEST, Warehouse
from tracebank.warehouse.records import (
    FileEntry,
    RunRecord,
    SilverManifest,
)
from tracebank.warehouse.storage import read_manifest


@dataclass
class VerifyReport:
    """What one verify pass found."""

    commits: int = 0
    """Committed folders (collections, silver caches, dataset versions) checked."""
    files: int = 0
    """Committed data files checked."""
    damaged: list[tuple[str, str]] = field(default_factory=list)
    """Each damaged path (or object URI) and what is wrong with it."""
    notes: list[str] = field(default_factory=list)
    """Things that are not damage but worth knowing (silver of a collection that is gone)."""

    def summary(self) -> str:
        state = f"{len(self.damaged)} damaged" if self.damaged else "all intact"
        return f"verify: {self.files} files in {self.commits} commits checked; {state}"


def _file_problem(path: Path, entry: FileEntry) -> str | None:
    if not path.is_file():
        return "missing"
    size = path.stat().st_size
    if size != entry.bytes:
        return f"{size} bytes, manifest says {entry.bytes}"
    if sha256_file(path) != entry.sha256:
        return "content differs from its sha256 in the manifest"
    return None


def verify(wh: Warehouse) -> VerifyReport:
    """Check every committed file of ``wh`` (see the module docstring)."""
    wh.check_format()
    report = VerifyReport()
    if wh.remote is not None:
        verify_store(wh, report)
    collections: set[str] = set()
    for folder, kind in commit_folders(wh):
        try:
            manifest = read_manifest(folder, kind)
        except CorruptFileError as exc:
            path = folder / MANIFEST
            report.damaged.append((str(path), exc.message.removeprefix(f"{path} ")))
            continue
        if manifest is None:
            continue  # never committed: not data (gc removes it)
        if wh.remote is None:  # a mirror's folders were counted in the store
            report.commits += 1
        if folder.parent == wh.collections_dir:
            collections.add(folder.name)
        for entry in manifest.files:
            if wh.remote is None:
                report.files += 1
            elif not (folder / entry.path).exists():
                continue  # a mirror holds only the files its machine has read
            problem = _file_problem(folder / entry.path, entry)
            if problem is not None:
                report.damaged.append((str(folder / entry.path), problem))
    for folder in sorted(p for p in wh.silver_dir.iterdir() if p.is_dir()) if wh.silver_dir.exists() else ():
        if folder.name not in collections and _readable(folder):
            report.notes.append(f"silver/{folder.name} belongs to no committed collection (never shown)")
    for run_json in sorted(wh.runs_dir.glob("*/run.json")) if wh.runs_dir.exists() else ():
        try:
            RunRecord.from_json(json.loads(run_json.read_text()), str(run_json))
        except ValueError as exc:
            report.damaged.append((str(run_json), f"is not valid JSON: {exc}"))
        except CorruptFileError as exc:
            report.damaged.append((str(run_json), exc.message.removeprefix(f"{run_json} ")))
    return report


def _readable(silver_folder: Path) -> bool:
    try:
        return read_manifest(silver_folder, SilverManifest) is not None
    except CorruptFileError:
        return False


def verify_store(wh: Warehouse, report: VerifyReport) -> None:
    """Check that every object a committed manifest on the store lists is there, with its
    size (contents are checked against the sha256 when a mirror downloads them)."""
    from tracebank.warehouse.mirror import commit_folder, remote_errors

    with remote_errors(wh.remote):
        sizes = {f.path: f.size for f in wh.remote.walk("")}
        for key in sorted(k for k in sizes if k.endswith(f"/{MANIFEST}")):
            found = commit_folder(key)
            if found is None or f"{found[0]}/{MANIFEST}" != key:
                continue
            folder, kind = found
            uri = f"{wh.remote.uri}/{key}"
            try:
                manifest = kind.from_json(json.loads(wh.remote.get(key) or b"null"), uri)
            except (ValueError, CorruptFileError) as exc:
                report.damaged.append((uri, str(exc).removeprefix(f"{uri} ")))
                continue
            report.commits += 1
            for entry in manifest.files:
                report.files += 1
                size = sizes.get(f"{folder}/{entry.path}")
                if size is None or size != entry.bytes:
                    problem = "missing" if size is None else f"{size} bytes, manifest says {entry.bytes}"
                    report.damaged.append((f"{wh.remote.uri}/{folder}/{entry.path}", problem))
