"""collect: copy rollouts, attempts and spans from an Agent Lightning store into the warehouse,
then derive their silver tables."""

from tracebank.collect.collector import CollectResult, collect, collect_async
from tracebank.collect.config import CollectConfig, parse_since
from tracebank.collect.errors import CollectError, StoreRequestError, StoreUnreachableError
from tracebank.collect.refresh import build_silver, silver_summary

__all__ = [
    "CollectConfig",
    "CollectError",
    "CollectResult",
    "StoreRequestError",
    "StoreUnreachableError",
    "build_silver",
    "collect",
    "collect_async",
    "parse_since",
    "silver_summary",
]
