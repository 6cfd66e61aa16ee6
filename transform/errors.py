"""Errors of the transform stage (all one-line, actionable; the CLI prints them)."""

from __future__ import annotations

from tracebank.core.errors import NotFoundError, TracebankError, UsageError


class TransformError(TracebankError):
    """The transform could not build a dataset version."""


class TransformUsageError(UsageError):
    """A bad transform option or combination of options."""


class NoCollectionsError(NotFoundError):
    """No committed collection to build from (or an unknown --collection)."""


class EmptyDatasetError(TransformError):
    """The chosen spans yield no row; nothing is written."""


class SilverMissingError(TransformError):
    """A chosen collection has no current silver cache (``collect`` builds it)."""
