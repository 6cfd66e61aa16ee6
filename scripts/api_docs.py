"""The API reference (``make docs``): pdoc over the public surface, every warning an error.

What a user of ``tracebank.open()`` meets: the package, the Warehouse and its results
(``tracebank.api``), the errors and progress events of ``tracebank.core``, the stage configs whose
fields are the methods' keywords, and the records the methods return. pdoc documents what a
module's ``__dict__`` holds, so the lazily loaded exports (``tracebank.core.lazy``) are loaded
first; a name in ``__all__`` that pdoc cannot resolve would otherwise be one more warning.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings
from pathlib import Path

MODULES = (
    "tracebank",
    "tracebank.api",
    *(f"tracebank.api.{m}" for m in ("warehouse", "collecting", "building", "training", "viewing", "upkeep")),
    *(f"tracebank.api.{m}" for m in ("dataset", "sql", "options", "base")),
    "tracebank.core.errors",
    "tracebank.core.events",
    "tracebank.collect.config",
    "tracebank.transform.config",
    "tracebank.train.config",
    "tracebank.rescore.config",
    "tracebank.view.config",
    "tracebank.loop.config",
    "tracebank.warehouse.records",
)


def load_exports(name: str) -> None:
    """Put each name of a package's ``__all__`` into its ``__dict__``, where pdoc looks."""
    module = importlib.import_module(name)
    for export in getattr(module, "__all__", ()):
        if export not in vars(module):
            setattr(module, export, getattr(module, export))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=Path("docs/api"), help="folder of the HTML")
    output = parser.parse_args().output
    warnings.simplefilter("error")  # a docstring pdoc cannot read fails the build
    import pdoc
    import pdoc.render

    for name in MODULES:
        load_exports(name)
    pdoc.render.configure(docformat="restructuredtext", search=True, show_source=False)
    pdoc.pdoc(*MODULES, output_directory=output)
    print(f"API reference: {output / 'index.html'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
