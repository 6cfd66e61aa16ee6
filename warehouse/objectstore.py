"""Where a warehouse's bytes live: a local folder or an object store, behind one small interface.

The commit protocol needs five things from a place to keep files: write a
file so that it appears whole or not at all, create a file only if no file of
that name exists (the one way two writers on different machines can claim the
same name, e.g. a dataset version number), read one, list a folder's
children, and hand a pyarrow filesystem to readers (DuckDB scans remote
Parquet through pyarrow datasets, since it cannot download its httpfs
extension here).

- :class:`LocalStore`: a folder; writes go to a temp name, are fsynced and
  renamed; exclusive create is ``O_CREAT | O_EXCL``.
- :class:`S3Store`: ``s3://bucket/prefix``; a PUT is atomic by itself;
  exclusive create is a PUT with ``If-None-Match: *`` (answered 412 when the
  key exists), which S3 and compatible stores (moto, MinIO) honour. Data goes
  through pyarrow's S3 filesystem, the conditional PUT through boto3 (the
  ``s3`` extra). Both find credentials, region and endpoint the usual way (the
  ``AWS_*`` environment variables, ``~/.aws/config`` and ``credentials``);
  nothing about them is ever written into the warehouse.

Object stores have no folders: a "folder" is a key prefix, and an empty one
does not exist. Every method here takes paths relative to the warehouse root,
with ``/`` separators.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

import pyarrow.fs as pafs
from tracebank.warehouse.commit import fsync_dir as _fsync_dir
from tracebank.warehouse.errors import UsageError, WarehouseError


@dataclass(frozen=True)
class StoredFile:
    """One file of a store, as a listing shows it."""

    path: str
    """Its path relative to the warehouse root, with ``/`` separators."""
    size: int
    """Its size in bytes."""
    mtime: float
    """When it was last written (seconds since the epoch)."""


class ObjectStore(Protocol):
    """The operations the commit protocol needs (paths relative to the warehouse root)."""

    uri: str

    def put(self, path: str, data: bytes) -> None:
        """Write ``path`` whole (a reader sees the old state or all of ``data``, never a part)."""

    def create_exclusive(self, path: str, data: bytes) -> bool:
        """Create ``path`` holding ``data`` unless it exists; True if this call created it."""

    def get(self, path: str) -> bytes | None:
        """The bytes of ``path``; None when there is no such file."""

    def children(self, path: str) -> list[str]:
        """Names directly under the folder ``path`` (files and sub-folders), sorted."""

    def delete(self, path: str) -> None:
        """Remove the file ``path`` (no error when it is gone)."""

    def arrow(self) -> tuple[pafs.FileSystem, str]:
        """A pyarrow filesystem and the root path in it, for Parquet readers and writers."""

    def walk(self, path: str) -> list[StoredFile]:
        """Every file under the folder ``path`` (at any depth), with its size and age."""

    def get_file(self, path: str, dest: Path) -> bool:
        """Copy ``path`` into the local file ``dest`` (streamed); False when there is no such file."""

    def put_file(self, path: str, src: Path) -> None:
        """Upload the local file ``src`` as ``path`` whole (streamed; visible only when complete)."""


@dataclass(frozen=True)
class LocalStore:
    """A warehouse in a local (or mounted) folder."""

    root: Path

    @property
    def uri(self) -> str:
        return str(self.root)

    def _path(self, path: str) -> Path:
        return self.root / path

    def put(self, path: str, data: bytes) -> None:
        final = self._path(path)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(f"{final.name}.tmp-{uuid.uuid4().hex[:12]}")
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, final)
            _fsync_dir(final.parent)
        finally:
            tmp.unlink(missing_ok=True)

    def create_exclusive(self, path: str, data: bytes) -> bool:
        final = self._path(path)
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        _fsync_dir(final.parent)
        return True

    def get(self, path: str) -> bytes | None:
        try:
            return self._path(path).read_bytes()
        except FileNotFoundError:
            return None

    def children(self, path: str) -> list[str]:
        folder = self._path(path)
        return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []

    def delete(self, path: str) -> None:
        self._path(path).unlink(missing_ok=True)

    def arrow(self) -> tuple[pafs.FileSystem, str]:
        return pafs.LocalFileSystem(), str(self.root)

    def walk(self, path: str) -> list[StoredFile]:
        base = self._path(path)
        out = []
        for dirpath, _, names in os.walk(base):
            for name in names:
                full = Path(dirpath) / name
                with contextlib.suppress(FileNotFoundError):
                    st = full.stat()
                    out.append(StoredFile(full.relative_to(self.root).as_posix(), st.st_size, st.st_mtime))
        return sorted(out, key=lambda f: f.path)

    def get_file(self, path: str, dest: Path) -> bool:
        try:
            shutil.copyfile(self._path(path), dest)
        except FileNotFoundError:
            return False
        return True

    def put_file(self, path: str, src: Path) -> None:
        final = self._path(path)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(f"{final.name}.tmp-{uuid.uuid4().hex[:12]}")
        try:
            shutil.copyfile(src, tmp)
            os.replace(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)


def _endpoint() -> str | None:
    """The S3 endpoint the AWS tools would use (for S3-compatible stores), else None (AWS)."""
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


@dataclass
class S3Store:
    """A warehouse under ``s3://bucket/prefix``."""

    bucket: str
    prefix: str
    _client: Any = field(default=None, repr=False)
    _fs: Any = field(default=None, repr=False)

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")

    def _key(self, path: str) -> str:
        return f"{self.prefix}/{path}".lstrip("/") if self.prefix else path

    def client(self) -> Any:
        if self._client is None:
            try:
                import boto3
            except ModuleNotFoundError as exc:
                raise UsageError(
                    "an s3:// warehouse needs boto3", "install it with `pip install 'tracebank[s3]'`"
                ) from exc
            self._client = boto3.client("s3", endpoint_url=_endpoint())
        return self._client

    def put(self, path: str, data: bytes) -> None:
        self.client().put_object(Bucket=self.bucket, Key=self._key(path), Body=data)

    def create_exclusive(self, path: str, data: bytes) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client().put_object(Bucket=self.bucket, Key=self._key(path), Body=data, IfNoneMatch="*")
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            # 412: the key exists; 409: another conditional write to it is in flight (S3 says retry,
            # but either way this writer did not create it).
            if status in (409, 412) or code in ("PreconditionFailed", "ConditionalRequestConflict"):
                return False
            raise
        return True

    def get(self, path: str) -> bytes | None:
        from botocore.exceptions import ClientError

        try:
            return bytes(self.client().get_object(Bucket=self.bucket, Key=self._key(path))["Body"].read())
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise

    def children(self, path: str) -> list[str]:
        prefix = self._key(path).rstrip("/") + "/" if path else (self.prefix + "/" if self.prefix else "")
        names: set[str] = set()
        for page in (
            self.client()
            .get_paginator("list_objects_v2")
            .paginate(Bucket=self.bucket, Prefix=prefix, Delimiter="/")
        ):
            names.update(c["Prefix"][len(prefix) :].rstrip("/") for c in page.get("CommonPrefixes", []))
            names.update(o["Key"][len(prefix) :] for o in page.get("Contents", []))
        return sorted(n for n in names if n)

    def delete(self, path: str) -> None:
        self.client().delete_object(Bucket=self.bucket, Key=self._key(path))

    def walk(self, path: str) -> list[StoredFile]:
        root = self._key("")
        prefix = self._key(path).rstrip("/") + "/" if path else root
        out = []
        for page in (
            self.client().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        ):
            for obj in page.get("Contents", []):
                out.append(
                    StoredFile(obj["Key"][len(root) :], int(obj["Size"]), obj["LastModified"].timestamp())
                )
        return sorted(out, key=lambda f: f.path)

    def get_file(self, path: str, dest: Path) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client().download_file(self.bucket, self._key(path), str(dest))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return False
            raise
        return True

    def put_file(self, path: str, src: Path) -> None:
        # Large files go up in parts; S3 shows the object only once the upload completes.
        self.client().upload_file(str(src), self.bucket, self._key(path))

    def arrow(self) -> tuple[pafs.FileSystem, str]:
        if self._fs is None:
            endpoint = _endpoint()
            options: dict[str, Any] = {}
            if endpoint:
                parsed = urlparse(endpoint)
                options = {"endpoint_override": parsed.netloc, "scheme": parsed.scheme or "https"}
            region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
            if region:
                options["region"] = region
            self._fs = pafs.S3FileSystem(**options)
        return self._fs, f"{self.bucket}/{self.prefix}".rstrip("/")


def open_store(location: str | os.PathLike[str]) -> LocalStore | S3Store:
    """The store of ``--warehouse``: ``s3://bucket[/prefix]`` or a local folder."""
    text = str(location)
    if "://" not in text:
        return LocalStore(Path(text).expanduser().resolve())
    parsed = urlparse(text)
    if parsed.scheme == "file":
        return LocalStore(Path(parsed.path).resolve())
    if parsed.scheme in ("s3", "s3a"):
        if len(parsed.netloc) < 3:
            raise UsageError(f"invalid S3 warehouse {text!r}", "use s3://BUCKET/PREFIX")
        return S3Store(parsed.netloc, parsed.path.strip("/"))
    raise WarehouseError(
        f"no object store for {parsed.scheme}:// warehouses yet",
        "use a local folder or s3://BUCKET/PREFIX (S3-compatible stores via AWS_ENDPOINT_URL_S3)",
    )
