"""The Python API: ``tracebank.open()`` gives a :class:`Warehouse` whose methods are the stages."""

from tracebank.core.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "tracebank.api.dataset": ("Dataset",),
        "tracebank.api.sql": ("SqlResult",),
        "tracebank.api.warehouse": ("Warehouse", "open"),
    },
)
