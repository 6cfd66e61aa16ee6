"""Choosing a warehouse's store: a local folder, or a bucket through this machine's mirror.

The one place that tells an ``s3://`` location from a folder. It sits above the commit protocol
(the layer test says so): committing, claiming and reading go through whichever
:class:`~tracebank.warehouse.bytestore.ByteStore` this hands the :class:`Warehouse`, and never
choose one themselves.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

from tracebank.core.errors import UsageError, WarehouseError
from tracebank.warehouse import layout
from tracebank.warehouse.bytestore import ByteStore, LocalStore
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.mirror import MirrorStore
from tracebank.warehouse.s3store import S3Store


def open_store(location: str | os.PathLike[str]) -> ByteStore:
    """The store of ``--warehouse``: ``s3://bucket[/prefix]`` (through this machine's mirror) or a folder."""
    text = str(location)
    if "://" not in text:
        return LocalStore(Path(text).expanduser().resolve())
    parsed = urlparse(text)
    if parsed.scheme == "file":
        return LocalStore(Path(parsed.path).resolve())
    if parsed.scheme in ("s3", "s3a"):
        if len(parsed.netloc) < 3:
            raise UsageError(f"invalid S3 warehouse {text!r}", "use s3://BUCKET/PREFIX")
        remote = S3Store(parsed.netloc, parsed.path.strip("/"))
        return MirrorStore(remote, layout.mirror_folder(remote.uri))
    raise WarehouseError(
        f"no object store for {parsed.scheme}:// warehouses yet",
        "use a local folder or s3://BUCKET/PREFIX (S3-compatible stores via AWS_ENDPOINT_URL_S3)",
    )


def locate(location: str | os.PathLike[str] | None = None) -> str:
    """``location``, else ``$TRACEBANK_WAREHOUSE``, else ``./warehouse``."""
    return str(location or os.environ.get(layout.ENV_VAR) or "warehouse")


def open_warehouse(location: str | os.PathLike[str] | None = None) -> Warehouse:
    """The warehouse at ``location`` (see :func:`locate`); ``s3://...`` is remote. Nothing is written."""
    store = open_store(locate(location))
    return Warehouse(store.root, store)
