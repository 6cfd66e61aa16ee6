"""Reading an Agent Lightning 0.3 store into a Batch.

Pages of ``query_rollouts`` (oldest first) are listed while ``concurrency`` workers
fetch the spans of each new attempt; the batch decides which attempts are new and
writes the spans as they arrive.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tracebank.collect.batch import Batch, Progress
from tracebank.collect.config import CollectConfig
from tracebank.collect.errors import SpansEvictedError
from tracebank.collect.source import StoreClient


class _StoreRead:
    """State of one pass over a store (one event loop)."""

    def __init__(
        self, client: StoreClient, batch: Batch, config: CollectConfig, progress: Progress | None
    ) -> None:
        self.client = client
        self.batch = batch
        self.config = config
        self.progress = progress
        self.filtered = 0
        self.handled = 0
        self.total = 0

    def _tick(self) -> None:
        if self.progress is not None:
            self.progress(self.handled, max(self.total, self.handled))

    def _keep(self, rollout: Any) -> bool:
        cfg = self.config
        if cfg.mode is not None and rollout.mode != cfg.mode:
            return False
        return not (cfg.since is not None and (rollout.start_time or 0.0) < cfg.since)

    async def produce(self, queue: asyncio.Queue[Any]) -> None:
        """Page through matching rollouts and queue them for the workers."""
        t0 = time.perf_counter()
        offset = 0
        try:
            while True:
                items, total = await self.client.rollouts_page(offset)
                self.total = total - self.filtered
                for rollout in items:
                    if self._keep(rollout):
                        await queue.put(rollout)
                    else:
                        self.filtered += 1
                        self.total -= 1
                offset += len(items)
                self._tick()
                if not items or offset >= total:
                    break
        finally:
            self.batch.seconds["list"] = time.perf_counter() - t0

    async def work(self, queue: asyncio.Queue[Any]) -> None:
        while True:
            rollout = await queue.get()
            try:
                if rollout is None:
                    return
                await self._one_rollout(rollout)
            finally:
                queue.task_done()

    async def _attempts_of(self, rollout: Any) -> list[Any]:
        if self.config.attempts == "all":
            return await self.client.attempts(rollout.rollout_id)
        attempt = getattr(rollout, "attempt", None)
        if attempt is None and rollout.status != "queuing":
            attempt = await self.client.latest_attempt(rollout.rollout_id)
        return [attempt] if attempt is not None else []

    async def _one_rollout(self, rollout: Any) -> None:
        rid = rollout.rollout_id
        row = None
        for attempt in await self._attempts_of(rollout):
            if not self.batch.wants(rid, attempt.attempt_id):
                continue
            try:
                spans, plain = await self.client.spans(rid, attempt.attempt_id)  # dicts
            except SpansEvictedError as exc:
                self.batch.evict(rid, attempt.attempt_id, exc.message)
                continue
            row = row or rollout.model_dump(exclude={"attempt"})
            await self.batch.add_spans(row, attempt.model_dump(), spans, plain)
        self.handled += 1
        self._tick()


async def read_store(store: Any, batch: Batch, config: CollectConfig, progress: Progress | None) -> None:
    """Read every new attempt of ``store`` (a URL or a LightningStore) into ``batch``."""
    t0 = time.perf_counter()
    client = await StoreClient.open(store, config)
    batch.seconds["connect"] = time.perf_counter() - t0
    run = _StoreRead(client, batch, config, progress)
    try:
        queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=config.concurrency * 4)
        workers = [asyncio.ensure_future(run.work(queue)) for _ in range(config.concurrency)]

        async def feed() -> None:
            await run.produce(queue)
            for _ in workers:
                await queue.put(None)

        tasks = [asyncio.ensure_future(feed()), *workers]
        try:
            finished, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in finished:
                if not task.cancelled() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
    finally:
        await client.close()
    batch.note("filtered_out", run.filtered)
