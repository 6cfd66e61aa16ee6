"""Errors of the serving loop (TracebankErrors, so the CLI reports them in one line)."""

from __future__ import annotations

from tracebank.core.errors import TracebankError, UsageError


class LoopError(TracebankError):
    """A serving round or the demo that cannot go on."""


class LoopUsageError(UsageError):
    """A bad round option: tasks file, agent spec, server choice, chained-stage option."""


class RoundTimeoutError(LoopError):
    """The round's rollouts did not all finish within the timeout."""


class NoSucceededRolloutsError(LoopError):
    """Every rollout of the round failed, so there is nothing to collect and train on."""
