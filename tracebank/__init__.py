"""tracebank: a durable, SQL-queryable warehouse and standalone trainer for Agent Lightning traces.

The repository keeps each stage in a top-level folder (``collect/``, ``transform/``,
``train/``, ``warehouse/``, ...); installation maps them into this namespace
(``tracebank.collect``, ...) so a user's own ``train.py`` can never shadow them.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    # Looked up on first use: importlib.metadata costs more than the rest of the CLI's start.
    if name != "__version__":
        raise AttributeError(f"module 'tracebank' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tracebank")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0+unknown"
