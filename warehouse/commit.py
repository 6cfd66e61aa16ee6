"""The commit protocol, written once over any byte store (a folder or a bucket through its mirror).

1. Data files are written under names only their writer uses (a fresh collection id, a reserved
   version number, a random silver build suffix), whole or not at all, in the local working
   folder; committing publishes them to the store.
2. The manifest listing them goes last. Where two writers could claim the same folder (a
   collection, a dataset version) it is an exclusive create, so the second fails instead of
   replacing the first; a silver cache's manifest is replaced in place.
3. A version number is reserved by an exclusive create of its ``RESERVED`` file, given back
   (with anything written under it) when the writer abandons it; a collection is retired by
   deleting its manifest (its files stay for readers that planned against them, until gc).

A folder without a manifest does not exist for readers, so a writer killed at any point leaves
only files no reader opens (gc removes them after its ``--min-age``).
"""

from __future__ import annotations

import json
import shutil
import time
from typing import Any

from tracebank.core.errors import WarehouseError
from tracebank.warehouse import finite, layout
from tracebank.warehouse.atomic import json_bytes
from tracebank.warehouse.bytestore import ByteStore
from tracebank.warehouse.claims import Owner
from tracebank.warehouse.records import Manifest


def record_bytes(doc: dict[str, Any], what: str) -> bytes:
    """How a manifest or record is written: standard JSON (no NaN or Infinity, which readers other
    than Python's refuse); WarehouseError naming the field of a non-finite number."""
    found = finite.first_non_finite(doc)  # checked, not serialised twice
    if found is not None:
        path, number = found
        raise WarehouseError(
            f"refusing to write {what}: {path} is {number}, not a finite number",
            "a number that is not finite is a bug of its writer",
        )
    return json_bytes(doc)


def manifest_bytes(manifest: Manifest) -> bytes:
    """How a manifest is written: its JSON form with its format version."""
    return record_bytes({**manifest.to_json(), "format_version": manifest.FORMAT_VERSION}, manifest.WHAT)


def commit_folder(store: ByteStore, folder: str, manifest: Manifest, exclusive: bool) -> None:
    """Publish the files ``manifest`` lists under ``folder``, then the manifest, last."""
    data = manifest_bytes(manifest)  # a manifest that cannot be written publishes nothing
    for entry in manifest.files:
        if not store.local_path(f"{folder}/{entry.path}").is_file():
            raise WarehouseError(f"refusing to commit {store.uri}/{folder}: {entry.path} is missing")
    for entry in manifest.files:
        store.publish(f"{folder}/{entry.path}")
    key = f"{folder}/{layout.MANIFEST}"
    if not exclusive:
        store.put(key, data)
    elif not store.create_exclusive(key, data):
        raise WarehouseError(f"{store.uri}/{folder} was committed by another writer first")


def retire(store: ByteStore, folder: str) -> None:
    """Make a committed folder invisible: its manifest goes, its files stay until gc."""
    store.delete(f"{folder}/{layout.MANIFEST}")


def next_version(store: ByteStore, dataset: str) -> int:
    """The next free version number under ``dataset`` (folders without a manifest count as taken)."""
    taken = [layout.version_number(name) for name in store.children(dataset)]
    return max((v for v in taken if v is not None), default=0) + 1


def reserve_version(store: ByteStore, dataset: str, owner: Owner) -> int:
    """Claim the first free version number of ``dataset`` (a concurrent writer gets another)."""
    payload = json.dumps({**owner.to_dict(), "since": time.time()}, sort_keys=True).encode()
    version = next_version(store, dataset)
    while not store.create_exclusive(
        f"{dataset}/{layout.version_folder_name(version)}/{layout.RESERVED}", payload
    ):
        version += 1
    return version


def release_version(store: ByteStore, folder: str) -> None:
    """Give a reserved, never committed version number back, with anything written under it."""
    if store.get(f"{folder}/{layout.MANIFEST}") is not None:
        return  # committed after all: never take a visible version apart
    reserved = f"{folder}/{layout.RESERVED}"
    for f in store.walk(folder):
        if f.path != reserved:
            store.delete(f.path)
    store.delete(reserved)
    shutil.rmtree(store.local_path(folder), ignore_errors=True)  # what was never published


def read_json(store: ByteStore, key: str) -> Any:
    """The parsed JSON of ``key``, None when absent; ValueError when it is not standard JSON
    (NaN, Infinity and numbers beyond float range included: see :mod:`finite`)."""
    data = store.get(key)
    return None if data is None else finite.loads(data)
