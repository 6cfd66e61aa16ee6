"""The warehouse: the folder every stage reads and writes, and its SQL views."""

from tracebank.warehouse.catalog import DatasetRef, resolve_dataset, resolve_run
from tracebank.warehouse.commit import (
    commit_manifest,
    read_manifest,
    verify_hashes,
    write_json_atomic,
    write_parquet_atomic,
)
from tracebank.warehouse.errors import (
    CorruptFileError,
    NotFoundError,
    QueryError,
    TracebankError,
    UsageError,
    WarehouseError,
)
from tracebank.warehouse.layout import Warehouse
from tracebank.warehouse.query import connect, run_sql

__all__ = [
    "CorruptFileError",
    "DatasetRef",
    "NotFoundError",
    "QueryError",
    "TracebankError",
    "UsageError",
    "Warehouse",
    "WarehouseError",
    "commit_manifest",
    "connect",
    "read_manifest",
    "resolve_dataset",
    "resolve_run",
    "run_sql",
    "verify_hashes",
    "write_json_atomic",
    "write_parquet_atomic",
]
