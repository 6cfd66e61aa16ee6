"""A warehouse's bytes under ``s3://bucket/prefix`` (S3 and compatible stores: MinIO, moto).

A PUT is atomic by itself; an exclusive create is a PUT with ``If-None-Match: *``, answered 412
when the key exists, which S3 and compatible stores honour. Credentials, region and endpoint
are found the usual way (the ``AWS_*`` environment variables, ``~/.aws/config`` and
``credentials``); nothing about them is ever written into the warehouse. Every failure of the
client (no endpoint, no credentials, no bucket) is one :class:`WarehouseError` line.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from tracebank.core.errors import UsageError, WarehouseError
from tracebank.warehouse.bytestore import StoredFile, check_key, sha256_stream

P = ParamSpec("P")
T = TypeVar("T")
_CLIENT_MODULES = ("botocore", "boto3", "s3transfer")
_MISSING = ("NoSuchKey", "404", "NotFound")


def _one_line_errors(method: Callable[P, T]) -> Callable[P, T]:
    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return method(*args, **kwargs)
        except WarehouseError:
            raise
        except Exception as exc:
            if type(exc).__module__.split(".")[0] not in _CLIENT_MODULES:
                raise
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            store = args[0]
            raise WarehouseError(
                f"cannot reach the warehouse at {store.uri}: {first}",  # type: ignore[attr-defined]
                "check the bucket and the AWS_* settings (endpoint, keys, region) this process sees",
            ) from exc

    return wrapper


def _error_code(exc: Any) -> tuple[str, Any]:
    response = getattr(exc, "response", {}) or {}
    return response.get("Error", {}).get("Code", ""), response.get("ResponseMetadata", {}).get(
        "HTTPStatusCode"
    )


def _endpoint() -> str | None:
    """The S3 endpoint the AWS tools would use (for S3-compatible stores), else None (AWS)."""
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


@dataclass
class S3Store:
    """The files of a warehouse under ``s3://bucket/prefix``."""

    bucket: str
    prefix: str
    _client: Any = field(default=None, repr=False, compare=False)

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")

    def _key(self, key: str) -> str:
        if key:
            check_key(key)
        return f"{self.prefix}/{key}".strip("/") if self.prefix else key

    def _folder(self, prefix: str) -> str:
        return self._key(prefix).rstrip("/") + "/" if (prefix or self.prefix) else ""

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

    @_one_line_errors
    def put(self, key: str, data: bytes) -> None:
        self.client().put_object(Bucket=self.bucket, Key=self._key(key), Body=data)

    @_one_line_errors
    def create_exclusive(self, key: str, data: bytes) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client().put_object(Bucket=self.bucket, Key=self._key(key), Body=data, IfNoneMatch="*")
        except ClientError as exc:
            code, status = _error_code(exc)
            # 412: the key exists; 409: another conditional write to it is in flight (S3 says retry,
            # but either way this writer did not create it).
            if status in (409, 412) or code in ("PreconditionFailed", "ConditionalRequestConflict"):
                return False
            raise
        return True

    @_one_line_errors
    def get(self, key: str) -> bytes | None:
        from botocore.exceptions import ClientError

        try:
            return bytes(self.client().get_object(Bucket=self.bucket, Key=self._key(key))["Body"].read())
        except ClientError as exc:
            if _error_code(exc)[0] in _MISSING:
                return None
            raise

    @_one_line_errors
    def get_file(self, key: str, dest: Path) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client().download_file(self.bucket, self._key(key), str(dest))
        except ClientError as exc:
            if _error_code(exc)[0] in _MISSING:
                return False
            raise
        return True

    @_one_line_errors
    def put_file(self, key: str, src: Path) -> None:
        # Large files go up in parts; S3 shows the object only once the upload completes.
        self.client().upload_file(str(src), self.bucket, self._key(key))

    @_one_line_errors
    def delete(self, key: str) -> None:
        self.client().delete_object(Bucket=self.bucket, Key=self._key(key))

    @_one_line_errors
    def walk(self, prefix: str) -> list[StoredFile]:
        root = self._folder("")
        out = []
        pages = (
            self.client()
            .get_paginator("list_objects_v2")
            .paginate(Bucket=self.bucket, Prefix=self._folder(prefix))
        )
        for page in pages:
            for obj in page.get("Contents", []):
                out.append(
                    StoredFile(obj["Key"][len(root) :], int(obj["Size"]), obj["LastModified"].timestamp())
                )
        return sorted(out, key=lambda f: f.path)

    @_one_line_errors
    def children(self, prefix: str) -> list[str]:
        folder = self._folder(prefix)
        names: set[str] = set()
        pages = (
            self.client()
            .get_paginator("list_objects_v2")
            .paginate(Bucket=self.bucket, Prefix=folder, Delimiter="/")
        )
        for page in pages:
            names.update(c["Prefix"][len(folder) :].rstrip("/") for c in page.get("CommonPrefixes", []))
            names.update(o["Key"][len(folder) :] for o in page.get("Contents", []))
        return sorted(n for n in names if n)

    @_one_line_errors
    def sha256(self, key: str) -> str | None:
        from botocore.exceptions import ClientError

        try:
            body = self.client().get_object(Bucket=self.bucket, Key=self._key(key))["Body"]
        except ClientError as exc:
            if _error_code(exc)[0] in _MISSING:
                return None
            raise
        return sha256_stream(body.iter_chunks(1 << 20))
