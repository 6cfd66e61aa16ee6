"""How a round talks to the agentlightning store: health, enqueue, wait, settle."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from typing import Any

from tracebank.core.events import OnEvent, RolloutProgress
from tracebank.loop.config import RoundConfig
from tracebank.loop.errors import RoundTimeoutError

TERMINAL = ("succeeded", "failed", "cancelled")


async def check_store(url: str, timeout_s: float = 3.0) -> None:
    """The store health check collect uses, so a wrong URL fails in seconds, before any server starts."""
    from tracebank.collect.source import check_store_health

    await check_store_health(url, timeout_s)


async def enqueue(store: Any, tasks: list[Any], mode: str, resources_id: str) -> list[str]:
    """Enqueue one rollout per task, tied to ``resources_id``, in batches (one request each)."""
    from agentlightning.types import EnqueueRolloutRequest

    ids: list[str] = []
    for start in range(0, len(tasks), 500):
        batch = [
            EnqueueRolloutRequest(input=t, mode=mode, resources_id=resources_id)  # type: ignore[arg-type]
            for t in tasks[start : start + 500]
        ]
        ids += [r.rollout_id for r in await store.enqueue_many_rollouts(batch)]
    return ids


async def wait_for_rollouts(
    store: Any, rollout_ids: list[str], config: RoundConfig, emit: OnEvent
) -> list[Any]:
    """Poll until every rollout is terminal; RoundTimeoutError after ``config.timeout_s``."""
    deadline = time.monotonic() + config.timeout_s
    done: dict[str, Any] = {}
    last = -1
    while True:
        pending = [rid for rid in rollout_ids if rid not in done]
        if pending:
            for rollout in await store.wait_for_rollouts(rollout_ids=pending, timeout=0.0):
                done[rollout.rollout_id] = rollout
        if len(done) != last:
            last = len(done)
            succeeded = sum(r.status == "succeeded" for r in done.values())
            emit(RolloutProgress(last, len(rollout_ids), succeeded, last - succeeded))
        if len(done) == len(rollout_ids):
            return [done[rid] for rid in rollout_ids]
        if time.monotonic() >= deadline:
            # The server goes down with this round: cancel what is left so no runner picks it up later.
            for rid in rollout_ids:
                if rid not in done:
                    with contextlib.suppress(Exception):
                        await store.update_rollout(rollout_id=rid, status="cancelled")
            raise RoundTimeoutError(
                f"{len(rollout_ids) - len(done)} of {len(rollout_ids)} rollouts unfinished after "
                f"{config.timeout_s:g}s",
                "are runners connected to the store and running the agent? (raise --timeout for slow agents)",
            )
        await asyncio.sleep(config.poll_interval_s)


async def settle_spans(store: Any, rollouts: Sequence[Any], config: RoundConfig) -> dict[str, int]:
    """Wait until the rollouts' span counts stop changing; return the spans per rollout.

    The proxy exports a call's spans after the call has been answered, so a
    rollout can be finished in the store before its last call's spans are in.
    A rollout's spans carry sequence ids 1..N handed out by the store; a gap
    means spans still on their way, so a gap also keeps the wait going (up to
    ``settle_timeout_s``: a call that failed inside the proxy leaves one for good).
    """
    ids = [r.rollout_id for r in rollouts if r.status == "succeeded"]
    start = time.monotonic()
    deadline = start + config.settle_timeout_s
    previous: dict[str, int] | None = None
    stable_since = start
    limit = asyncio.Semaphore(16)

    async def look(rid: str) -> tuple[int, bool]:
        async with limit:
            spans = await store.query_spans(rid, "latest")
        seqs = {s.sequence_id for s in spans}
        return len(spans), bool(seqs) and len(seqs) < max(seqs)

    while True:
        looks = await asyncio.gather(*(look(rid) for rid in ids))
        counts = {rid: n for rid, (n, _) in zip(ids, looks, strict=True)}
        gaps = any(gap for _, gap in looks)
        now = time.monotonic()
        if counts != previous:
            previous, stable_since = counts, now
        if (not gaps and now - stable_since >= config.settle_s) or now >= deadline:
            return counts
        await asyncio.sleep(0.2)
