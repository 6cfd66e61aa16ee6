"""tracebank: a durable, SQL-queryable warehouse and standalone trainer for Agent Lightning traces.

The repository keeps each stage in a top-level folder (``collect/``, ``transform/``,
``train/``, ``warehouse/``, ...); installation maps them into this namespace
(``tracebank.collect``, ...) so a user's own ``train.py`` can never shadow them.
"""

import os
from typing import Any

# Polars' allocator (jemalloc) keeps freed pages for seconds before handing them back, so each
# join or sort of a transform's planning phase (hundreds of thousands of calls at 1 B tokens)
# left its scratch resident: +130 MB of peak RSS at 1 B tokens, none of it live. Its
# configuration is read when polars first allocates, hence here, before any stage imports it
# (the rest of the memory policy is warehouse.memory's). A user's own setting wins.
os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:0,muzzy_decay_ms:0")


def __getattr__(name: str) -> Any:
    # Looked up on first use: importlib.metadata costs more than the rest of the CLI's start.
    if name != "__version__":
        raise AttributeError(f"module 'tracebank' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tracebank")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0+unknown"
