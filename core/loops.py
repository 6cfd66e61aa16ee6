"""Running a stage that drives its own asyncio loop from wherever it is called."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def outside_event_loop(call: Callable[[], T]) -> T:
    """``call()``, on a worker thread when this thread runs an asyncio loop (a Jupyter kernel does):
    a stage that drives its own loop with ``asyncio.run`` cannot start one inside another."""
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return call()
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(call).result()
