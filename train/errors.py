"""Errors of the train stage (one line each; the CLI adds the exit code)."""

from __future__ import annotations

from tracebank.core.errors import TracebankError, UsageError


class TrainError(TracebankError):
    """Training could not start or did not finish: bad data, bad model, a crashed child, a timeout."""


class TrainConfigError(TrainError, UsageError):
    """A bad hyperparameter or a combination of options that cannot work (exit code 2)."""

    exit_code = 2
