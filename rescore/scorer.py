"""Finding the scorer a user names, and the hash of its source (which makes a layer reproducible)."""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tracebank.core.user_code import load_function
from tracebank.rescore.errors import RescoreUsageError


def load_scorer(scorer: str) -> Callable[[Any], Any]:
    """The function ``MODULE:FUNCTION`` (or ``FILE.py:FUNCTION``) names."""
    return load_function(scorer, "scorer", "--scorer", RescoreUsageError)


def source_of(function: Callable[[Any], Any]) -> tuple[str, str]:
    """(source file, sha256 of its bytes): the same source gives the same scores."""
    path = inspect.getsourcefile(function)
    if path is None:
        raise RescoreUsageError(f"the scorer {function!r} has no source file to hash")
    return path, hashlib.sha256(Path(path).read_bytes()).hexdigest()
