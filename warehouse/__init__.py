"""The warehouse: the folder (or bucket) every stage reads and writes, its typed records and its SQL views."""

from tracebank.core.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "tracebank.warehouse.catalog": (
            "DatasetRef",
            "resolve_dataset",
            "resolve_run",
        ),
        "tracebank.warehouse.location": ("Warehouse",),
        "tracebank.warehouse.query": (
            "ResultRows",
            "connect",
            "run_sql",
            "sql_rows",
        ),
        "tracebank.warehouse.records": (
            "CollectionManifest",
            "DatasetManifest",
            "FileEntry",
            "RunRecord",
            "SilverManifest",
        ),
        "tracebank.warehouse.storage": (
            "Storage",
            "check_sizes",
            "read_table",
            "verify_hashes",
        ),
    },
)
