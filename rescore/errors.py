"""Errors of the rescore stage (all one-line, actionable; the CLI prints them)."""

from __future__ import annotations

from tracebank.core.errors import TracebankError, UsageError


class RescoreError(TracebankError):
    """Archived rollouts could not be rescored."""


class RescoreUsageError(UsageError):
    """A bad rescore option (a scorer that cannot be imported, a bad name)."""
