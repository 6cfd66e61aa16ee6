"""The one error hierarchy of tracebank.

Every stage raises subclasses of :class:`TracebankError`; only the CLI turns
them into one-line messages and exit codes.
"""

from __future__ import annotations

import warnings


class TracebankError(Exception):
    """Base of every error tracebank reports to a user.

    ``message`` is one line saying what went wrong; ``hint`` (optional) says
    what to do about it.
    """

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        """The message and hint as a single line for a terminal."""
        return f"{self.message} ({self.hint})" if self.hint else self.message


class UsageError(TracebankError):
    """A bad flag, argument or combination of them."""

    exit_code = 2


class WarehouseError(TracebankError):
    """The warehouse folder is missing, of another format, or inconsistent."""


class CorruptFileError(WarehouseError):
    """A committed file is truncated, altered or unreadable."""


class NotFoundError(WarehouseError):
    """A collection, dataset version or run that does not exist."""


class QueryError(TracebankError):
    """A SQL statement that is refused or fails."""


def first_line(exc: BaseException, *, with_type: bool = False) -> str:
    """One line for an exception a library raised: its message's first line (prefixed with the
    exception's type when ``with_type``), or the type's name when the message is empty."""
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    line = text.splitlines()[0]
    return f"{type(exc).__name__}: {line}" if with_type else line


class DamageWarning(UserWarning):
    """Something in the warehouse is damaged or missing, and was left out of what is shown."""


def warn_damage(message: str) -> None:
    """Say (once per message; the CLI prints it as one ``Warning:`` line) what was left out and why."""
    warnings.warn(DamageWarning(message), stacklevel=2)
