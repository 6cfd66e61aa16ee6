"""A warehouse on object storage, worked on through a local mirror: a wrapper around a remote store.

The remote store (:class:`~tracebank.warehouse.s3store.S3Store`) holds the truth; this machine
keeps a folder (``root``, under ``~/.cache/tracebank/warehouses/``) that readers and writers use
as they use a local warehouse. :class:`MirrorStore` is a :class:`~tracebank.warehouse.bytestore.ByteStore`
like the local one, so nothing above it knows where the warehouse lives:

- **Data files** are written here first and go up when their commit publishes them; a committed
  file this machine lacks is downloaded when a reader first needs it (:meth:`MirrorStore.fetch`),
  beside its final name, checked against the manifest's size and sha256, then renamed into place.
  A mirror holds only what its machine read or wrote, and only verified bytes.
- **Small mutable files** (manifests, run records, metrics) are read from the store; a copy is
  kept under ``.mirror/cache`` and reused while the store's latest listing shows the same size
  and time, so an unchanged folder costs one listing. A file this machine has written but not yet
  published (a run's metrics between uploads) is read from here: it is newer than the store's.
- **Exclusive creates, deletes and listings** go to the store as they are.

Why a mirror rather than remote scans: committed files never change, so a verified copy is
always right; DuckDB (which cannot fetch its httpfs extension offline) and the trainer's
memory-mapped reads work unchanged; and a download is checked against the sha256, which DuckDB's
own reads never do. The cost is disk: a mirror holds what this machine has read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from tracebank.core.errors import CorruptFileError
from tracebank.warehouse import atomic
from tracebank.warehouse.bytestore import RemoteStore, StoredFile, check_key, committed_file

#: The mirror's own bookkeeping, beside the warehouse's folders.
BOOKKEEPING = ".mirror"


def _stamp_of(f: StoredFile) -> str:
    return f"{f.size}:{f.mtime}"


def _local_stamp(path: Path) -> str | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return f"{st.st_size}:{st.st_mtime_ns}"


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


@dataclass
class MirrorStore:
    """A remote store seen through this machine's folder of verified copies."""

    remote: RemoteStore
    root: Path
    _listed: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def uri(self) -> str:
        return self.remote.uri

    def local_path(self, key: str) -> Path:
        path = self.root / check_key(key)
        # A symlink planted in the mirror must not carry a write outside it.
        if not path.resolve().is_relative_to(self.root.resolve()):
            raise CorruptFileError(f"{path} leads outside the mirror {self.root}", "remove the link")
        return path

    def _aside(self, kind: str, key: str) -> Path:
        return self.root / BOOKKEEPING / kind / check_key(key)

    def _mark_published(self, key: str) -> None:
        stamp = _local_stamp(self.local_path(key))
        if stamp is not None:
            atomic.write_bytes_atomic(self._aside("published", key), stamp.encode())

    def _unpublished(self, key: str) -> bool:
        """Whether this machine wrote ``key`` after it last published it (so its copy is newer)."""
        stamp = _local_stamp(self.local_path(key))
        return stamp is not None and _read(self._aside("published", key)) != stamp.encode()

    def _keep_local(self, key: str, data: bytes) -> None:
        atomic.write_bytes_atomic(self.local_path(key), data)
        self._mark_published(key)

    # -- writing ------------------------------------------------------------------------------
    def put(self, key: str, data: bytes) -> None:
        self.remote.put(key, data)  # the store first: the mirror never shows what the store lacks
        self._keep_local(key, data)

    def create_exclusive(self, key: str, data: bytes) -> bool:
        if not self.remote.create_exclusive(key, data):
            return False
        self._keep_local(key, data)
        return True

    def publish(self, key: str) -> None:
        self.remote.put_file(key, self.local_path(key))
        self._mark_published(key)

    def put_file(self, key: str, src: Path) -> None:
        self.remote.put_file(key, src)

    def delete(self, key: str) -> None:
        self.remote.delete(key)
        for path in (self.local_path(key), self._aside("published", key), self._aside("cache", key)):
            path.unlink(missing_ok=True)

    # -- reading ------------------------------------------------------------------------------
    def get(self, key: str) -> bytes | None:
        if self._unpublished(key):
            return _read(self.local_path(key))
        cached, stamp_file = self._aside("cache", key), self._aside("stamp", key)
        listed = self._listed.get(key)
        if listed is not None and _read(stamp_file) == listed.encode():
            data = _read(cached)
            if data is not None:
                return data
        data = self.remote.get(key)
        if data is not None and listed is not None:
            atomic.write_bytes_atomic(cached, data)
            atomic.write_bytes_atomic(stamp_file, listed.encode())
        return data

    def get_file(self, key: str, dest: Path) -> bool:
        return self.remote.get_file(key, dest)

    def fetch(self, key: str, size: int, sha256: str) -> Path:
        path = self.local_path(key)
        if os.path.lexists(path):  # a link planted in the mirror is never read through
            committed_file(self.root, key)
        if path.is_file() and path.stat().st_size == size:
            return path  # written here, or downloaded and checked before
        with atomic.atomic_path(path) as tmp:
            if not self.remote.get_file(key, tmp):
                raise CorruptFileError(f"committed file {self.uri}/{key} is missing from the store")
            if os.path.getsize(tmp) != size or atomic.sha256_file(tmp) != sha256:
                raise CorruptFileError(
                    f"committed file {self.uri}/{key} does not match its manifest (size or sha256)",
                    "the object was altered after commit; restore it or remove its folder's manifest",
                )
        return path

    def walk(self, prefix: str) -> list[StoredFile]:
        listing = self.remote.walk(prefix)
        under = f"{prefix}/" if prefix else ""
        for gone in [k for k in self._listed if k.startswith(under)]:
            del self._listed[gone]
        self._listed.update((f.path, _stamp_of(f)) for f in listing)
        return listing

    def children(self, prefix: str) -> list[str]:
        return self.remote.children(prefix)

    def sha256(self, key: str) -> str | None:
        return self.remote.sha256(key)
