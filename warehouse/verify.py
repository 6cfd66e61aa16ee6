"""`tracebank verify`: check every committed file against its manifest, like `git fsck`.

Written once over the warehouse's store keys, so a folder and a bucket are checked alike: each
file a committed manifest lists must exist with the recorded size and sha256 (hashed as a
stream, a chunk at a time, from the store itself). A manifest that is not valid JSON or not of a
manifest's shape, and a run record that is not valid JSON, are damage too. Reported: every
damaged path (or object URI) with what is wrong; nothing is changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tracebank.core.errors import CorruptFileError
from tracebank.warehouse import layout
from tracebank.warehouse.bytestore import ByteStore
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.records import FileEntry, Manifest
from tracebank.warehouse.storage import MANIFEST_KINDS, Storage, parse_manifest


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


def _stored_damage(store: ByteStore, key: str, entry: FileEntry, sizes: dict[str, int]) -> str | None:
    """What is wrong with the stored object ``key`` against its manifest ``entry``: missing, another
    size (from one listing of the store, ``sizes``), or content that hashes differently; None when
    intact. Unlike a reader's check (``Storage.unreadable``) nothing is downloaded: the store hashes
    the object where it is, so a bucket is verified without a mirror."""
    size = sizes.get(key)
    if size is None:
        return "missing"
    if size != entry.bytes:
        return f"{size} bytes, manifest says {entry.bytes}"
    if store.sha256(key) != entry.sha256:
        return "content differs from its sha256 in the manifest"
    return None


def _check_commit(
    store: ByteStore, folder: str, manifest: Manifest, sizes: dict[str, int], report: VerifyReport
) -> None:
    report.commits += 1
    for entry in manifest.files:
        report.files += 1
        key = f"{folder}/{entry.path}"
        problem = _stored_damage(store, key, entry, sizes)
        if problem is not None:
            report.damaged.append((f"{store.uri}/{key}", problem))


def _check_runs(wh: Warehouse, report: VerifyReport) -> None:
    storage = Storage(wh)
    for run_id in storage.run_ids():
        where = f"{wh.store.uri}/{layout.run_key(run_id)}/{layout.RUN_RECORD}"
        try:
            storage.read_run(run_id, settle=False)
        except CorruptFileError as exc:
            report.damaged.append((where, exc.message.removeprefix(f"{where} ")))


def verify(wh: Warehouse) -> VerifyReport:
    """Check every committed file of ``wh`` (see the module docstring)."""
    wh.check_format()
    report = VerifyReport()
    store = wh.store
    listing = store.walk("")
    sizes = {f.path: f.size for f in listing}
    collections: set[str] = set()
    silver: list[str] = []
    for f in listing:
        folder = layout.commit_folder_of(f.path)
        if folder is None or not layout.is_manifest_of(f.path, folder):
            continue
        try:
            manifest = parse_manifest(store, folder.key, MANIFEST_KINDS[folder.kind])
        except CorruptFileError as exc:
            where = f"{store.uri}/{f.path}"
            report.damaged.append((where, exc.message.removeprefix(f"{where} ")))
            continue
        if manifest is None:
            continue  # deleted since the listing
        _check_commit(store, folder.key, manifest, sizes, report)
        name = folder.key.partition("/")[2]
        if folder.kind == "collection":
            collections.add(name)
        elif folder.kind == "silver":
            silver.append(name)
    for name in sorted(set(silver) - collections):
        report.notes.append(f"silver/{name} belongs to no committed collection (never shown)")
    _check_runs(wh, report)
    return report
