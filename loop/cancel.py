"""Blocking steps of a round (a server starting, a training run) that Ctrl-C can still cancel."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any


async def run_blocking(
    fn: Callable[..., Any],
    *args: Any,
    cancel: threading.Event | None = None,
    abandon: Callable[[Any], None] | None = None,
) -> Any:
    """``fn(*args)`` on a worker thread, cancellable through ``cancel``.

    Since Python 3.11, Ctrl-C inside ``asyncio.run`` cancels the main task at the
    loop's next turn instead of raising in whatever code is running, so long
    blocking steps (a server starting, a training run) must not block the loop.
    When this coroutine is cancelled it sets ``cancel`` (``fn`` watches it and
    stops what it started) and waits for ``fn`` to return before re-raising, so
    nothing keeps running behind the caller's back; a result that arrives anyway
    is handed to ``abandon`` (e.g. to stop a server that came up just then).
    """
    future = asyncio.get_running_loop().run_in_executor(None, fn, *args)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        if cancel is not None:
            cancel.set()
        with contextlib.suppress(BaseException):
            result = await future
            if abandon is not None:
                abandon(result)
        raise
