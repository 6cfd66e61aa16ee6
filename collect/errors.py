"""Errors of the collect stage (all TracebankErrors, so the CLI reports them in one line)."""

from __future__ import annotations

from tracebank.core.errors import NotFoundError, TracebankError, UsageError


class CollectError(TracebankError):
    """A collect run that cannot go on; nothing of it was committed."""


class CollectUsageError(UsageError):
    """A bad collect flag or store URL."""


class StoreUnreachableError(CollectError):
    """The store URL does not answer its health check."""


class StoreRequestError(CollectError):
    """A store request failed for good (after retries, or with an error retrying cannot fix)."""


class SpansEvictedError(CollectError):
    """The store no longer holds a rollout's spans (the in-memory store evicted them)."""


class UnknownCollectionError(NotFoundError):
    """A collection id that is not committed in the warehouse."""
