"""collect: copy rollouts, attempts and spans (0.3) or events (1.0) from an Agent Lightning
store, server or spool into the warehouse, then derive their silver tables."""

from tracebank.core.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "tracebank.collect.collector": (
            "CollectResult",
            "collect",
            "collect_async",
        ),
        "tracebank.collect.config": (
            "CollectConfig",
            "parse_since",
        ),
        "tracebank.collect.errors": (
            "CollectError",
            "StoreRequestError",
            "StoreUnreachableError",
        ),
        "tracebank.collect.refresh": (
            "build_silver",
            "silver_summary",
        ),
        "tracebank.collect.sources": (
            "Agl1ServerSource",
            "FileSource",
            "Source",
            "SpoolSource",
            "StoreSource",
            "server_source",
        ),
    },
)
