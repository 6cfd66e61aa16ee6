"""collect: copy rollouts, attempts and spans (0.3) or events (1.0) from an Agent Lightning
store, server or spool into the warehouse, then derive their silver tables."""

from tracebank.collect.collector import CollectResult, collect, collect_async
from tracebank.collect.config import CollectConfig, parse_since
from tracebank.collect.errors import CollectError, StoreRequestError, StoreUnreachableError
from tracebank.collect.refresh import build_silver, silver_summary
from tracebank.collect.sources import Agl1ServerSource, Source, SpoolSource, StoreSource, server_source

__all__ = [
    "Agl1ServerSource",
    "CollectConfig",
    "CollectError",
    "CollectResult",
    "Source",
    "SpoolSource",
    "StoreRequestError",
    "StoreSource",
    "StoreUnreachableError",
    "build_silver",
    "collect",
    "collect_async",
    "parse_since",
    "server_source",
    "silver_summary",
]
