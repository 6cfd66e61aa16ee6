"""How the CLI shows a warehouse's :class:`DamageWarning`: one ``Warning:`` line on stderr each."""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Iterator
from typing import Any, TextIO

from tracebank.core.errors import DamageWarning
from tracebank.core.text import visible

_default_show = warnings.showwarning


def _show(
    message: Any,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    if not issubclass(category, DamageWarning):
        _default_show(message, category, filename, lineno, file, line)
        return
    text = visible(str(message), keep="")  # a manifest or trace may quote control characters
    print(f"Warning: {text}", file=file or sys.stderr)


@contextlib.contextmanager
def shown_as_lines() -> Iterator[None]:
    """For the block, print each distinct DamageWarning once, as one line (then restore)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("default", category=DamageWarning)
        warnings.showwarning = _show
        yield
