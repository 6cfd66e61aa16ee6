"""The atomic-write protocol under :class:`tracebank.warehouse.storage.Storage` (its only user
besides the FORMAT.json of a new warehouse).

Data files are written under a temporary name, fsynced and renamed into place;
the manifest listing them is written last, the same way. A reader only trusts
files named by a committed manifest, so a writer killed at any point leaves
nothing a reader can see, only unreferenced files that ``tracebank gc`` may
delete.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from tracebank.warehouse.errors import CorruptFileError
from tracebank.warehouse.records import FileEntry, Manifest

TMP_MARK = ".tmp-"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _tmp_name(final: Path) -> Path:
    return final.with_name(f"{final.name}{TMP_MARK}{uuid.uuid4().hex[:12]}")


@contextmanager
def atomic_path(final: Path) -> Iterator[Path]:
    """Yield a temp path to write; on success fsync it and rename it to ``final``."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_name(final)
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, final)
        fsync_dir(final.parent)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_bytes_atomic(final: Path, data: bytes) -> None:
    with atomic_path(final) as tmp:
        tmp.write_bytes(data)


def write_buffer_atomic(final: Path, data: Any, rows: int | None = None) -> dict[str, Any]:
    """Write bytes already in memory (bytes, memoryview, ``pa.Buffer``) to ``final`` atomically;
    return its manifest file entry, hashed from memory instead of reading the file back."""
    view = memoryview(data)
    with atomic_path(final) as tmp, open(tmp, "wb") as fh:
        fh.write(view)
    entry: dict[str, Any] = {
        "path": final.name,
        "bytes": view.nbytes,
        "sha256": hashlib.sha256(view).hexdigest(),
    }
    if rows is not None:
        entry["rows"] = rows
    return entry


def json_bytes(obj: Any) -> bytes:
    """How the warehouse writes JSON (manifests, records): sorted keys, indented, a final newline."""
    return (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode()


def write_json_atomic(final: Path, obj: Any) -> None:
    write_bytes_atomic(final, json_bytes(obj))


def write_parquet_atomic(final: Path, table: pa.Table, **kwargs: Any) -> dict[str, Any]:
    """Write ``table`` to ``final`` atomically; return its manifest file entry."""
    kwargs.setdefault("compression", "zstd")
    kwargs.setdefault("write_page_checksum", True)  # CRCs that Storage's readers verify
    with atomic_path(final) as tmp:
        pq.write_table(table, tmp, **kwargs)
    return file_entry(final, rows=table.num_rows)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def file_entry(path: Path, rows: int | None = None) -> dict[str, Any]:
    """What a manifest records of one data file: name relative to the manifest, size, hash."""
    entry: dict[str, Any] = {
        "path": path.name,
        "bytes": path.stat().st_size,
        "sha256": sha256_file(path),
    }
    if rows is not None:
        entry["rows"] = rows
    return entry


def size_problem(path: Path, entry: FileEntry) -> str | None:
    """Why the committed file at ``path`` does not match ``entry`` by size (missing, or another
    size), or None when it does."""
    if not path.exists():
        return f"committed file {path} is missing"
    size = path.stat().st_size
    if size != entry.bytes:
        return f"committed file {path} is {size} bytes, manifest says {entry.bytes}"
    return None


def check_sizes(folder: Path, manifest: Manifest) -> None:
    """Cheap integrity check: every listed file exists with the recorded size."""
    from tracebank.warehouse.mirror import ensure_files  # a mirror fetches what it lacks first

    ensure_files(folder, manifest.files)
    for entry in manifest.files:
        problem = size_problem(folder / entry.path, entry)
        if problem is not None:
            raise CorruptFileError(problem, "the file was truncated or altered after commit")


def verify_hashes(folder: Path, manifest: Manifest) -> None:
    """Full integrity check: sizes, then the sha256 of every listed file."""
    check_sizes(folder, manifest)
    for entry in manifest.files:
        path = folder / entry.path
        if sha256_file(path) != entry.sha256:
            raise CorruptFileError(
                f"committed file {path} does not match its sha256 in the manifest",
                "the file was altered after commit; rebuild it",
            )
