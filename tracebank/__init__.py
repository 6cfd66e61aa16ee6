"""tracebank: a durable, SQL-queryable warehouse and standalone trainer for Agent Lightning traces.

The repository keeps each stage in a top-level folder (``collect/``, ``transform/``,
``train/``, ``warehouse/``, ...); installation maps them into this namespace
(``tracebank.collect``, ...) so a user's own ``train.py`` can never shadow them.

The API is one object: ``wh = tracebank.open("warehouse")`` gives a :class:`Warehouse` whose
methods are the stages (``collect``, ``transform``, ``sql``, ``dataset``, ``rescore``, ``train``,
``export``, ``report``...). Every error it raises is a :class:`TracebankError`.
"""

import os
from typing import Any

# Polars' allocator (jemalloc) keeps freed pages for seconds before handing them back, so each
# join or sort of a transform's planning phase (hundreds of thousands of calls at 1 B tokens)
# left its scratch resident: +130 MB of peak RSS at 1 B tokens, none of it live. Its
# configuration is read when polars first allocates, hence here, before any stage imports it
# (the rest of the memory policy is warehouse.memory's). A user's own setting wins.
os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:0,muzzy_decay_ms:0")


from tracebank.core.lazy import lazy_exports  # noqa: E402 (after the allocator setting above)

_exports, __dir__, _names = lazy_exports(
    __name__,
    {
        "tracebank.api.dataset": ("Dataset",),
        "tracebank.api.sql": ("SqlResult",),
        "tracebank.api.warehouse": ("Warehouse", "open"),
        "tracebank.core.errors": (
            "CorruptFileError",
            "NotFoundError",
            "QueryError",
            "TracebankError",
            "UsageError",
            "WarehouseError",
        ),
        "tracebank.core.events": ("Event", "OnEvent"),
    },
)
__all__ = [*_names, "__version__"]


def __getattr__(name: str) -> Any:
    if name != "__version__":
        return _exports(name)
    # Looked up on first use: importlib.metadata costs more than the rest of the CLI's start.
    from tracebank.core.versions import installed_version

    return installed_version("tracebank") or "0+unknown"  # a source tree never installed
