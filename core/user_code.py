"""Loading a function the user names (``MODULE:FUNCTION`` or ``FILE.py:FUNCTION``): a rescore scorer,
a transform agent key. It is the user's own code, run with their rights; never a name a record holds."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from tracebank.core.errors import UsageError


def _module(ref: str, what: str, error: type[UsageError]) -> ModuleType:
    if ref.endswith(".py") or os.sep in ref:
        path = Path(ref).expanduser().resolve()
        if not path.is_file():
            raise error(f"{what} file {path} does not exist")
        spec = importlib.util.spec_from_file_location(f"tracebank_{what.replace(' ', '_')}_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    # Appended, never first: a user's module may not shadow tracebank's own packages.
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    return importlib.import_module(ref)


def load_function(spec: str, what: str, flag: str, error: type[UsageError]) -> Callable[..., Any]:
    """The function ``spec`` (``MODULE:FUNCTION`` or ``FILE.py:FUNCTION``) names; ``what`` names it in
    errors ("scorer"), ``flag`` is the option that gave it; a failure is one ``error`` line."""
    ref, _, name = spec.rpartition(":")
    if not ref or not name:
        raise error(f"{flag} {spec!r} is not MODULE:FUNCTION", f"{flag} module:function or file.py:function")
    try:
        module = _module(ref, what, error)
    except UsageError:
        raise
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        raise error(
            f"cannot import {what} module {ref!r}: {type(exc).__name__}: {first}",
            f"run from the folder that holds it, or pass its file: {flag} path/to/file.py:FUNCTION",
        ) from None
    function = getattr(module, name, None)
    if not callable(function):
        raise error(f"{ref} has no function {name!r}", f"{flag} {ref}:FUNCTION")
    return function
