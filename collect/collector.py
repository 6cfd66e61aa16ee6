"""collect: the one entry that copies new rollouts from any source into one committed collection.

A run takes the warehouse's collect claim (one collect of a warehouse at a time, on any
machine), reads what is committed, lets its source (a 0.3 store, a 1.0 server, a 1.0
spool: ``sources.py``) hand over every (rollout, attempt) that matches the filters,
and commits what was new through the one path of ``batch.py``: data files first, the
manifest last. Until then no reader sees any of it, so a run killed at any point
leaves the warehouse as it was and the next run simply starts over on what is still
missing. Then the new collection's silver tables are built.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracebank.collect import silver
from tracebank.collect.batch import Batch, Progress, committed_attempts
from tracebank.collect.config import CollectConfig
from tracebank.collect.sources import Source, as_source
from tracebank.core import events as ev
from tracebank.core.errors import TracebankError, first_line
from tracebank.core.events import OnEvent
from tracebank.core.loops import outside_event_loop
from tracebank.warehouse.claims import POLL_S, Claim, Owner, release, try_claim, warehouse_claim
from tracebank.warehouse.contract import SILVER_VERSION
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.records import SilverManifest
from tracebank.warehouse.storage import Storage


@dataclass
class CollectResult:
    """What one collect run did; ``collection_id`` is None when there was nothing new."""

    collection_id: str | None
    folder: Path | None
    store: str
    counts: dict[str, int]
    seconds: dict[str, float]
    evicted: list[dict[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    redaction: dict[str, Any] = field(default_factory=dict)
    silver: SilverManifest | None = None
    """The new collection's silver cache; None when nothing was committed or ``config.silver`` is off."""
    silver_rebuilt: list[str] = field(default_factory=list)
    """Earlier collections whose missing or stale silver cache this run built (a `--no-silver`
    collect, or one killed between its commit and its silver build)."""

    @property
    def committed(self) -> bool:
        return self.collection_id is not None

    def summary(self) -> str:
        """The one line the CLI prints at the end."""
        c = self.counts
        head = f"collected {self.collection_id}" if self.committed else "nothing new"
        records = f"{c['events']} events" if "events" in c else f"{c['spans']} spans"  # 1.0 | 0.3
        bad = ""
        if "bad_records" in c:  # a file source: name its format (the store is FORMAT:PATH)
            head += f" from {self.store}"
            bad = f", {c['bad_records']} bad records"
        return (
            f"{head}: {c['rollouts']} new rollouts, {records}, {c['skipped']} skipped{bad}, "
            f"{c['evicted']} evicted in {self.seconds['total']:.1f}s"
        )

    def summary_lines(self) -> list[str]:
        """What ``tracebank collect`` prints: the summary, then the silver tables it built."""
        from tracebank.collect.refresh import silver_summary

        lines = [self.summary()]
        if self.silver_rebuilt:
            lines.append(f"silver: built the missing caches of {', '.join(self.silver_rebuilt)}")
        if self.silver is not None:
            lines.append(f"silver: {silver_summary(self.silver)}")
        return lines


@contextlib.contextmanager
def _older_objects_frozen() -> Iterator[None]:
    """Keep the garbage collector off the objects that existed before the run.

    A collect keeps thousands of span dicts alive between store round trips, and that
    many survivors set off a full collection, which walks every object of the process:
    with agentlightning and LiteLLM imported, ~0.4 s, as long as the rest of collect's
    own work on 10k spans. Frozen objects are skipped by every collection until the run
    ends and they are unfrozen. Left alone when the caller froze objects itself or turned
    the collector off.
    """
    if not gc.isenabled() or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


async def collect_async(
    source: Source | Any,
    wh: Warehouse,
    config: CollectConfig | None = None,
    on_event: OnEvent | None = None,
) -> CollectResult:
    """The coroutine behind :func:`collect`, for callers already inside an event loop."""
    src = as_source(source)
    config = (config or CollectConfig()).validate()
    emit = on_event or (lambda _event: None)
    with _older_objects_frozen():
        result = await _collect(src, wh, config, emit)
    if result.collection_id is not None and config.silver:
        try:
            result.silver = await asyncio.to_thread(silver.build_silver, wh, result.collection_id)
        except (TracebankError, OSError) as exc:
            # The collection is committed and nothing of it is lost: a warning, not a failure.
            result.warnings.append(
                f"collection {result.collection_id} is committed, but its silver tables were not built "
                f"({_why(exc)}); `tracebank transform` builds them"
            )
    if config.silver:
        await asyncio.to_thread(_rebuild_missing_silver, wh, result)
    return result


def _rebuild_missing_silver(wh: Warehouse, result: CollectResult) -> None:
    """Build the silver caches earlier collects left missing or stale, so `sql` and `show` see
    every committed collection (a failure is a warning: the bronze is safe either way)."""
    storage = Storage(wh)
    current = {f.name for f, m in storage.silver_caches() if m.silver_version == SILVER_VERSION}
    for folder, _ in storage.collections():
        if folder.name == result.collection_id or folder.name in current:
            continue
        try:
            silver.build_silver(wh, folder.name)
        except (TracebankError, OSError) as exc:
            result.warnings.append(f"the silver tables of {folder.name} are still missing ({_why(exc)})")
            continue
        result.silver_rebuilt.append(folder.name)


def _why(exc: BaseException) -> str:
    if isinstance(exc, TracebankError):
        return exc.one_line()
    if isinstance(exc, OSError) and (exc.errno == errno.ENOSPC or f"[errno {errno.ENOSPC}]" in str(exc)):
        return "no space left on the device"
    return first_line(exc)


async def _collect(
    src: Source,
    wh: Warehouse,
    config: CollectConfig,
    emit: OnEvent,
) -> CollectResult:
    t_start = time.perf_counter()
    wh.init()
    owner = Owner.current("collect")
    path = collect_claim(wh)
    await _claim(path, owner, emit)

    def progress(done: int, total: int) -> None:
        emit(ev.CollectProgress(done, total))

    try:
        return await _collect_claimed(src, wh, config, progress, t_start)
    finally:
        release(path, owner)


def collect_claim(wh: Warehouse) -> Claim:
    """The claim one collect of ``wh`` holds from reading what is committed to committing: two
    collects at once (on any machines) would otherwise both fetch, and store, the same new attempts."""
    return warehouse_claim(wh, "collect")


async def _claim(path: Claim, owner: Owner, emit: OnEvent) -> None:
    told = False
    while (holder := await asyncio.to_thread(try_claim, path, owner)) is not None:
        if not told:
            emit(ev.WaitingForWarehouse(holder.describe()))
            told = True
        await asyncio.sleep(POLL_S)


async def _collect_claimed(
    src: Source, wh: Warehouse, config: CollectConfig, progress: Progress | None, t_start: float
) -> CollectResult:
    done, repeats = committed_attempts(wh)
    batch = Batch(wh, config, src.records, done, repeats)
    t_read = time.perf_counter()
    try:
        await src.read(batch, config, progress)
        t_fetch = time.perf_counter()
        files = await batch.write()
    except BaseException:
        await batch.abandon()
        raise
    seconds = dict(batch.seconds)
    seconds["fetch"] = t_fetch - t_read - seconds.get("connect", 0.0)
    seconds["write"] = time.perf_counter() - t_fetch
    seconds["total"] = time.perf_counter() - t_start
    seconds = {k: round(v, 3) for k, v in seconds.items()}
    store, counts, warnings, redaction = src.description, batch.counts(), batch.warnings(), batch.redaction()
    if not batch.has_new:
        batch.committed()  # nothing new: everything read was committed before
        return CollectResult(None, None, store, counts, seconds, [], warnings, redaction)
    await asyncio.to_thread(batch.commit, batch.manifest(store, files, seconds))
    return CollectResult(batch.cid, batch.folder, store, counts, seconds, batch.evicted, warnings, redaction)


def collect(
    source: Source | Any,
    wh: Warehouse,
    config: CollectConfig | None = None,
    on_event: OnEvent | None = None,
) -> CollectResult:
    """Collect new rollouts from ``source`` into ``wh``: a Source (``StoreSource``,
    ``Agl1ServerSource``, ``SpoolSource``), or a 0.3 store URL or LightningStore.

    Commits one new collection and then builds its silver tables (unless
    ``config.silver`` is off), or commits nothing when every matching attempt is
    already in the warehouse. Raises StoreUnreachableError, StoreRequestError
    or CollectUsageError (all TracebankErrors) with nothing committed. One collect of a
    warehouse runs at a time: another waits (``on_event`` gets a WaitingForWarehouse, once).
    """
    return outside_event_loop(lambda: asyncio.run(collect_async(source, wh, config, on_event)))
