"""Errors of the view stage (show, report, export): one line each, the CLI prints them."""

from __future__ import annotations

from tracebank.core.errors import NotFoundError, TracebankError, UsageError


class ViewError(TracebankError):
    """A view could not be built (e.g. no tokenizer where one is needed)."""


class ViewUsageError(UsageError):
    """A bad option or combination of options of show, report or export."""


class NothingToShowError(NotFoundError):
    """The rollout, dataset row or run asked for is not in the warehouse."""
