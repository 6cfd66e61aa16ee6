"""``tracebank.open()``: the Warehouse, one object whose methods are the stages.

Each method takes the CLI command's flags as keywords (underscores for dashes), builds the
same config class, owns its preconditions (the format is checked once, silver tables are built
where missing, names and tags are checked) and returns a typed result; the CLI parses, makes one
call and prints. Progress goes to an optional ``on_event`` callback of typed events
(:mod:`tracebank.core.events`).
"""

from __future__ import annotations

import os

from tracebank.api.building import BuildMethods
from tracebank.api.collecting import CollectMethods
from tracebank.api.training import TrainMethods
from tracebank.api.upkeep import UpkeepMethods
from tracebank.api.viewing import ViewMethods
from tracebank.warehouse.backends import locate, open_store


class Warehouse(CollectMethods, BuildMethods, TrainMethods, ViewMethods, UpkeepMethods):
    """A warehouse (a folder or ``s3://bucket/prefix``) and everything tracebank does with it.

    >>> wh = tracebank.open("warehouse")                       # doctest: +SKIP
    >>> wh.collect("http://127.0.0.1:4747", tag="round-3")      # doctest: +SKIP
    >>> v = wh.transform("gsm", top_fraction=0.5)               # doctest: +SKIP
    >>> wh.sql("SELECT count(*) FROM llm_calls").rows()         # doctest: +SKIP
    """

    def __repr__(self) -> str:
        return f"tracebank.Warehouse({self.location!r})"


def open(location: str | os.PathLike[str] | None = None) -> Warehouse:  # noqa: A001 (as sqlite_utils/duckdb name it)
    """The warehouse at ``location`` (a folder, or ``s3://bucket/prefix``; default
    ``$TRACEBANK_WAREHOUSE``, else ``./warehouse``). Nothing is written until a method writes;
    an existing warehouse's format is checked here, once."""
    store = open_store(locate(location))
    wh = Warehouse(store.root, store)
    if wh.exists():  # reads the format once; every later check uses what was read
        wh.check_format()
    return wh
