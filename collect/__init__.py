"""collect: copy rollouts, attempts and spans from an Agent Lightning store into the warehouse."""

from tracebank.collect.collector import CollectResult, collect, collect_async
from tracebank.collect.config import CollectConfig, parse_since
from tracebank.collect.errors import CollectError, StoreRequestError, StoreUnreachableError

__all__ = [
    "CollectConfig",
    "CollectError",
    "CollectResult",
    "StoreRequestError",
    "StoreUnreachableError",
    "collect",
    "collect_async",
    "parse_since",
]
