"""The warehouse: the folder (or bucket) every stage reads and writes, its typed records and its SQL views."""

from tracebank.warehouse.catalog import DatasetRef, resolve_dataset, resolve_run
from tracebank.warehouse.errors import (
    CorruptFileError,
    NotFoundError,
    QueryError,
    TracebankError,
    UsageError,
    WarehouseError,
)
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.query import connect, run_sql
from tracebank.warehouse.records import (
    CollectionManifest,
    DatasetManifest,
    FileEntry,
    RunRecord,
    SilverManifest,
)
from tracebank.warehouse.storage import Storage, check_sizes, read_table, verify_hashes

__all__ = [
    "CollectionManifest",
    "CorruptFileError",
    "DatasetManifest",
    "DatasetRef",
    "FileEntry",
    "NotFoundError",
    "QueryError",
    "RunRecord",
    "SilverManifest",
    "Storage",
    "TracebankError",
    "UsageError",
    "Warehouse",
    "WarehouseError",
    "check_sizes",
    "connect",
    "read_table",
    "resolve_dataset",
    "resolve_run",
    "run_sql",
    "verify_hashes",
]
