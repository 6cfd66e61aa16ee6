"""Package exports loaded on first use, so importing a package (and so the CLI) stays cheap.

A package's ``__init__`` names what it exports and where each name lives; the module that holds
it (with its polars, pyarrow, duckdb or torch) is imported the first time the name is used.
``tests/architecture`` reads these tables as imports, so they count in the import graph.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy_exports(
    package: str, exports: dict[str, tuple[str, ...]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``__getattr__``, ``__dir__`` and ``__all__`` for ``package``; ``exports`` maps a module to
    the names the package re-exports from it."""
    where = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # the next use is a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted(where)

    return __getattr__, __dir__, sorted(where)
