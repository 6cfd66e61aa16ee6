"""Where a warehouse's bytes live, behind one small interface, and its local-folder implementation.

The commit protocol (:mod:`tracebank.warehouse.commit`) needs few things from a place to keep
files: write one whole or not at all, create one only if no file of that name exists (the one
way two writers, on any machines, can claim the same name), read one, hand a reader a local
file it can memory-map or scan with DuckDB (checked against the size, and on download the
sha256, its manifest recorded), delete one, list a folder. :class:`ByteStore` is that
interface; every key is a path relative to the warehouse root with ``/`` separators.

- :class:`LocalStore` is a folder (a warehouse on this machine, or on a mounted file system).
  It is also a :class:`RemoteStore`, so a mirror can wrap it (the tests do).
- :class:`~tracebank.warehouse.mirror.MirrorStore` wraps a :class:`RemoteStore` (S3, see
  :mod:`tracebank.warehouse.s3store`) with this machine's folder of verified copies.

:func:`tracebank.warehouse.backends.open_store` is the one place that tells them apart.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tracebank.core.errors import CorruptFileError, UsageError, WarehouseError
from tracebank.warehouse import atomic


@dataclass(frozen=True)
class StoredFile:
    """One file of a store, as a listing shows it."""

    path: str
    """Its key: the path relative to the warehouse root, with ``/`` separators."""
    size: int
    """Its size in bytes."""
    mtime: float
    """When it was last written (seconds since the epoch)."""


def check_key(key: str) -> str:
    """``key`` if it is a plain relative key (no absolute path, ``..``, empty part, ``\\`` or NUL)."""
    parts = key.split("/")
    if (
        not key
        or "\\" in key
        or "\x00" in key
        or any(p in ("", ".", "..") for p in parts)
        or os.path.isabs(key)
    ):
        raise UsageError(
            f"refusing the unsafe warehouse key {key!r}", "keys are plain names inside the warehouse"
        )
    return key


def no_link_between(base: Path, path: Path) -> bool:
    """Whether ``path`` lies under ``base`` with no symlink on the way from ``base`` to its parent
    (its own name may be a link: deleting it removes the link, never what it points to)."""
    if ".." in path.parts:
        return False
    try:
        rel = path.parent.relative_to(base)
    except ValueError:
        return False
    return Path(os.path.realpath(path.parent)) == Path(os.path.realpath(base)) / rel


def refuse_linked_folders(root: Path, names: tuple[str, ...]) -> None:
    """Raise WarehouseError if one of the folders ``names`` of the warehouse folder ``root`` is a
    symlink: a co-worker with write access to a shared warehouse could point one anywhere."""
    for name in names:
        link = root / name
        if link.is_symlink():
            raise WarehouseError(
                f"{link} is a symbolic link (to {os.readlink(link)}); tracebank never follows one out "
                "of the warehouse",
                "replace the link with the folder it points to, or remove it",
            )


def committed_file(root: Path, key: str) -> Path:
    """The local file of the committed ``key`` under ``root``, never reached through a symlink
    (one planted in place of a committed file, or of a folder above it, would make a reader read
    whatever it points to): else a one-line CorruptFileError, which readers report as damage."""
    path = root / check_key(key)
    if path.is_symlink() or Path(os.path.realpath(path)) != Path(os.path.realpath(root)) / key:
        raise CorruptFileError(
            f"committed file {path} is a symbolic link", "a committed file is a plain file; restore it"
        )
    return path


class RemoteStore(Protocol):
    """A store that holds the truth somewhere else (an S3 bucket); a mirror wraps one."""

    @property
    def uri(self) -> str: ...

    def put(self, key: str, data: bytes) -> None:
        """Write ``key`` whole (a reader sees the old state or all of ``data``, never a part)."""

    def create_exclusive(self, key: str, data: bytes) -> bool:
        """Create ``key`` holding ``data`` unless it exists; True if this call created it."""

    def get(self, key: str) -> bytes | None:
        """The bytes of ``key``; None when there is no such file."""

    def get_file(self, key: str, dest: Path) -> bool:
        """Copy ``key`` into the local file ``dest`` (streamed); False when there is no such file."""

    def put_file(self, key: str, src: Path) -> None:
        """Upload the local file ``src`` as ``key`` whole (streamed; visible only when complete)."""

    def delete(self, key: str) -> None:
        """Remove ``key`` (no error when it is gone)."""

    def walk(self, prefix: str) -> list[StoredFile]:
        """Every file under the folder ``prefix`` (at any depth; ``""`` is the root), sorted."""

    def children(self, prefix: str) -> list[str]:
        """Names directly under the folder ``prefix`` (files and sub-folders), sorted."""

    def sha256(self, key: str) -> str | None:
        """The sha256 of ``key``, streamed (memory: a chunk); None when there is no such file."""


class ByteStore(RemoteStore, Protocol):
    """What :class:`~tracebank.warehouse.storage.Storage` works through: a store plus the local
    folder (``root``) where this machine writes files before they are published and reads them."""

    @property
    def root(self) -> Path: ...

    def local_path(self, key: str) -> Path:
        """The local file of ``key`` (where a writer writes it, where a reader reads it)."""

    def publish(self, key: str) -> None:
        """Make the local file of ``key``, written whole by this process, the store's."""

    def fetch(self, key: str, size: int, sha256: str) -> Path:
        """The local file of the committed ``key``, present with ``size`` bytes (a copy from
        elsewhere is checked against ``sha256`` too), else a one-line CorruptFileError."""


@dataclass(frozen=True)
class LocalStore:
    """A warehouse in a local (or mounted) folder: the store and the working folder are one."""

    root: Path

    @property
    def uri(self) -> str:
        return str(self.root)

    def local_path(self, key: str) -> Path:
        return self.root / check_key(key)

    def put(self, key: str, data: bytes) -> None:
        atomic.write_bytes_atomic(self.local_path(key), data)

    def create_exclusive(self, key: str, data: bytes) -> bool:
        return atomic.create_exclusive(self.local_path(key), data)

    def get(self, key: str) -> bytes | None:
        try:
            return self.local_path(key).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    def get_file(self, key: str, dest: Path) -> bool:
        try:
            shutil.copyfile(self.local_path(key), dest)
        except (FileNotFoundError, IsADirectoryError):
            return False
        return True

    def put_file(self, key: str, src: Path) -> None:
        with atomic.atomic_path(self.local_path(key)) as tmp:
            shutil.copyfile(src, tmp)

    def publish(self, key: str) -> None:
        if not self.local_path(key).is_file():
            raise CorruptFileError(f"cannot publish {self.local_path(key)}: it was never written")

    def fetch(self, key: str, size: int, sha256: str) -> Path:
        path = self.local_path(key)
        if os.path.lexists(path):
            path = committed_file(self.root, key)
        try:
            actual = path.stat().st_size
        except (FileNotFoundError, NotADirectoryError):
            raise CorruptFileError(
                f"committed file {path} is missing", "the file was deleted after commit; restore it"
            ) from None
        if actual != size:
            raise CorruptFileError(
                f"committed file {path} is {actual} bytes, manifest says {size}",
                "the file was truncated or altered after commit",
            )
        return path

    def delete(self, key: str) -> None:
        path = self.local_path(key)
        path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # an emptied folder goes too, as on an object store
            path.parent.rmdir()

    def walk(self, prefix: str) -> list[StoredFile]:
        base = self.local_path(prefix) if prefix else self.root
        out = []
        for dirpath, _, names in os.walk(base):
            for name in names:
                full = Path(dirpath) / name
                with contextlib.suppress(FileNotFoundError):
                    st = full.lstat()
                    out.append(StoredFile(full.relative_to(self.root).as_posix(), st.st_size, st.st_mtime))
        return sorted(out, key=lambda f: f.path)

    def children(self, prefix: str) -> list[str]:
        folder = self.local_path(prefix) if prefix else self.root
        return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []

    def sha256(self, key: str) -> str | None:
        path = self.local_path(key)
        return atomic.sha256_file(path) if path.is_file() else None


def sha256_stream(chunks: object) -> str:
    """The sha256 of an iterable of byte chunks."""
    h = hashlib.sha256()
    for chunk in chunks:  # type: ignore[attr-defined]
        h.update(chunk)
    return h.hexdigest()
