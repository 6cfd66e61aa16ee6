"""Finding the scorer a user names, and the hash of its source (which makes a layer reproducible)."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from tracebank.rescore.errors import RescoreUsageError


def _module(ref: str) -> ModuleType:
    if ref.endswith(".py") or os.sep in ref:
        path = Path(ref).expanduser().resolve()
        if not path.is_file():
            raise RescoreUsageError(f"scorer file {path} does not exist")
        spec = importlib.util.spec_from_file_location(f"tracebank_scorer_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    # Appended, never first: a user's module may not shadow tracebank's own packages.
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    return importlib.import_module(ref)


def load_scorer(scorer: str) -> Callable[[Any], Any]:
    """The function ``MODULE:FUNCTION`` (or ``FILE.py:FUNCTION``) names."""
    ref, _, name = scorer.rpartition(":")
    try:
        module = _module(ref)
    except RescoreUsageError:
        raise
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        raise RescoreUsageError(
            f"cannot import scorer module {ref!r}: {type(exc).__name__}: {first}",
            "run from the folder that holds it, or pass its file: --scorer path/to/file.py:FUNCTION",
        ) from None
    function = getattr(module, name, None)
    if not callable(function):
        raise RescoreUsageError(f"{ref} has no function {name!r}", f"--scorer {ref}:FUNCTION")
    return function


def source_of(function: Callable[[Any], Any]) -> tuple[str, str]:
    """(source file, sha256 of its bytes): the same source gives the same scores."""
    path = inspect.getsourcefile(function)
    if path is None:
        raise RescoreUsageError(f"the scorer {function!r} has no source file to hash")
    return path, hashlib.sha256(Path(path).read_bytes()).hexdigest()
