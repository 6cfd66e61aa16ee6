"""collect: copy new rollouts, attempts and spans from a store into one committed collection.

One run lists the rollouts that match the filters (pages of ``query_rollouts``,
oldest first), drops every (rollout, attempt) an earlier collection already
holds, fetches the spans of the rest with ``concurrency`` queries in flight,
and writes ``rollouts``, ``attempts`` and ``spans`` Parquet files into a new
folder ``collections/<id>/``. The manifest is written last; until then no
reader sees any of it, so a run killed at any point leaves the warehouse as it
was and the next run simply starts over on what is still missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import errno
import gc
import secrets
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracebank.collect import silver
from tracebank.collect.config import CollectConfig
from tracebank.collect.errors import SpansEvictedError
from tracebank.collect.redact import Redactor
from tracebank.collect.source import StoreSource
from tracebank.collect.writer import SpanFileWriter, write_table
from tracebank.warehouse import bronze
from tracebank.warehouse.claims import POLL_S, Claim, Owner, release, try_claim, warehouse_claim
from tracebank.warehouse.contract import LLM_SPAN_NAMES
from tracebank.warehouse.errors import TracebankError
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.records import CollectionManifest, SilverManifest
from tracebank.warehouse.storage import Storage, check_sizes, files_of, read_table

#: ``progress(done, total)``: attempts handled so far and the best known total.
Progress = Callable[[int, int], None]

NO_LLM_SPANS_HINT = (
    "likely cause: the LLMProxy exported its spans to localhost:4318 instead of the store "
    "(opentelemetry-exporter-otlp-proto-http >= 1.44 binds the OTLP endpoint when the exporter "
    "is built, and LLMProxy only changes it later); give the proxy an exporter bound to the "
    "store's /v1/traces, or pin the exporter below 1.44"
)


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

    @property
    def committed(self) -> bool:
        return self.collection_id is not None

    def summary(self) -> str:
        """The one line the CLI prints at the end."""
        c = self.counts
        head = f"collected {self.collection_id}" if self.committed else "nothing new"
        records = f"{c['events']} events" if "events" in c else f"{c['spans']} spans"  # 1.0 | 0.3
        return (
            f"{head}: {c['rollouts']} new rollouts, {records}, {c['skipped']} skipped, "
            f"{c['evicted']} evicted in {self.seconds['total']:.1f}s"
        )


def new_collection_id(now: dt.datetime | None = None) -> str:
    """``cYYYYMMDDTHHMMSSZ-mmmrrr``: sorts by creation time to the millisecond (``mmm``, hex),
    and the random ``rrr`` keeps two collects of the same millisecond apart."""
    now = now or dt.datetime.now(dt.UTC)
    return f"c{now:%Y%m%dT%H%M%SZ}-{now.microsecond // 1000:03x}{secrets.token_hex(2)[:3]}"


def already_collected(wh: Warehouse) -> set[tuple[str, str]]:
    """(rollout_id, attempt_id) of every attempt a committed collection holds or recorded as evicted."""
    return _committed_attempts(wh)[0]


def _committed_attempts(wh: Warehouse) -> tuple[set[tuple[str, str]], int]:
    """:func:`already_collected`, and how many stored attempts repeat one stored before."""
    done: set[tuple[str, str]] = set()
    repeats = 0
    storage = Storage(wh)
    for folder, manifest in storage.collections():
        check_sizes(folder, manifest)
        for path in files_of(folder, manifest, "attempts"):
            table = read_table([path], columns=["rollout_id", "attempt_id"])
            pairs = set(
                zip(
                    table.column("rollout_id").to_pylist(),
                    table.column("attempt_id").to_pylist(),
                    strict=True,
                )
            )
            repeats += len(pairs & done)
            done |= pairs
        for ev in manifest.evicted:
            done.add((ev["rollout_id"], ev["attempt_id"]))
    return done, repeats


def _versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for dist in ("tracebank", "agentlightning"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = None
    return out


class _Run:
    """State of one collect run (one event loop)."""

    def __init__(
        self,
        src: StoreSource,
        wh: Warehouse,
        config: CollectConfig,
        cid: str,
        done: set[tuple[str, str]],
        progress: Progress | None,
    ) -> None:
        self.src = src
        self.config = config
        self.cid = cid
        self.folder = wh.collection_dir(cid)
        self.done = done
        self.progress = progress
        self.redactor = Redactor()
        self.storage = Storage(wh)
        self.writer = SpanFileWriter(self.storage, self.folder, cid, config.rows_per_file)
        self.rollouts: dict[str, dict[str, Any]] = {}
        self.attempts: list[dict[str, Any]] = []
        self.evicted: list[dict[str, str]] = []
        self.no_llm: list[str] = []
        self.succeeded = 0
        self.skipped = 0
        self.filtered = 0
        self.handled = 0
        self.total = 0
        self.seen: set[tuple[str, str]] = set()
        self.list_seconds = 0.0

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
                items, total = await self.src.rollouts_page(offset)
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
            self.list_seconds = time.perf_counter() - t0

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
            return await self.src.attempts(rollout.rollout_id)
        attempt = getattr(rollout, "attempt", None)
        if attempt is None and rollout.status != "queuing":
            attempt = await self.src.latest_attempt(rollout.rollout_id)
        return [attempt] if attempt is not None else []

    async def _one_rollout(self, rollout: Any) -> None:
        rid = rollout.rollout_id
        for attempt in await self._attempts_of(rollout):
            key = (rid, attempt.attempt_id)
            if key in self.seen:
                continue
            self.seen.add(key)
            if key in self.done:
                self.skipped += 1
                continue
            try:
                spans, plain = await self.src.spans(rid, attempt.attempt_id)  # dicts
            except SpansEvictedError as exc:
                self.evicted.append(
                    {"rollout_id": rid, "attempt_id": attempt.attempt_id, "reason": exc.message}
                )
                continue
            dicts = spans
            if self.config.redact:
                for d in dicts:
                    self.redactor.span(d)
            if rollout.status == "succeeded":
                self.succeeded += 1
                if not any(d["name"] in LLM_SPAN_NAMES for d in dicts):
                    self.no_llm.append(rid)
            self.writer.add(dicts, plain)
            await self.writer.drain()
            self.attempts.append(self._redacted(attempt.model_dump()))
            if rid not in self.rollouts:
                row = rollout.model_dump(exclude={"attempt"})
                self.rollouts[rid] = self._redacted(row)
        self.handled += 1
        self._tick()

    def _redacted(self, record: dict[str, Any]) -> dict[str, Any]:
        if self.config.redact:
            for key in ("input", "config", "metadata"):
                if key in record:
                    record[key] = self.redactor.value(None, record[key])
        return record


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
    source: Any,
    wh: Warehouse,
    config: CollectConfig | None = None,
    progress: Progress | None = None,
    on_wait: Callable[[str], None] | None = None,
) -> CollectResult:
    """The coroutine behind :func:`collect`, for callers already inside an event loop."""
    with _older_objects_frozen():
        result = await _collect(source, wh, config, progress, on_wait)
    if result.collection_id is not None and (config or CollectConfig()).silver:
        try:
            result.silver = await asyncio.to_thread(silver.build_silver, wh, result.collection_id)
        except (TracebankError, OSError) as exc:
            # The collection is committed and nothing of it is lost: a warning, not a failure.
            result.warnings.append(
                f"collection {result.collection_id} is committed, but its silver tables were not built "
                f"({_why(exc)}); `tracebank transform` builds them"
            )
    return result


def _why(exc: BaseException) -> str:
    if isinstance(exc, TracebankError):
        return exc.one_line()
    if isinstance(exc, OSError) and (exc.errno == errno.ENOSPC or f"[errno {errno.ENOSPC}]" in str(exc)):
        return "no space left on the device"
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


async def _collect(
    source: Any,
    wh: Warehouse,
    config: CollectConfig | None,
    progress: Progress | None,
    on_wait: Callable[[str], None] | None = None,
) -> CollectResult:
    config = (config or CollectConfig()).validate()
    t_start = time.perf_counter()
    wh.init()
    owner = Owner.current("collect")
    path = collect_claim(wh)
    await _claim(path, owner, on_wait)
    try:
        return await _collect_claimed(source, wh, config, progress, t_start)
    finally:
        release(path, owner)


def collect_claim(wh: Warehouse) -> Claim:
    """The claim one collect of ``wh`` holds from reading what is committed to committing: two
    collects at once (on any machines) would otherwise both fetch, and store, the same new attempts."""
    return warehouse_claim(wh, "collect")


async def _claim(path: Claim, owner: Owner, on_wait: Callable[[str], None] | None) -> None:
    told = False
    while (holder := await asyncio.to_thread(try_claim, path, owner)) is not None:
        if not told and on_wait is not None:
            on_wait(f"waiting for {holder.describe()} to finish with this warehouse")
            told = True
        await asyncio.sleep(POLL_S)


async def _collect_claimed(
    source: Any, wh: Warehouse, config: CollectConfig, progress: Progress | None, t_start: float
) -> CollectResult:
    created_at = dt.datetime.now(dt.UTC)
    done, repeats = _committed_attempts(wh)
    src = await StoreSource.open(source, config)
    t_open = time.perf_counter()
    cid = new_collection_id(created_at)
    run = _Run(src, wh, config, cid, done, progress)
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
            await run.writer.abandon()
            raise
        span_entries = await run.writer.finish()
    finally:
        await src.close()
    t_fetch = time.perf_counter()

    counts = {
        "rollouts": len(run.rollouts),
        "attempts": len(run.attempts),
        "spans": run.writer.rows,
        "skipped": run.skipped,
        "evicted": len(run.evicted),
        "no_llm_spans": len(run.no_llm),
        "filtered_out": run.filtered,
    }
    warnings = []
    if repeats:
        warnings.append(
            f"{repeats} attempts are stored more than once in this warehouse (collects that ran at "
            "the same time before collect took turns); `tracebank collect --repair-duplicates` "
            "keeps one copy of each"
        )
    if run.no_llm:
        warnings.append(
            f"{len(run.no_llm)} of {run.succeeded} succeeded rollouts have no LLM-call spans "
            f"(raw_gen_ai_request / litellm_request), so there is nothing to train on in them; "
            f"{NO_LLM_SPANS_HINT}"
        )
    if run.evicted:
        warnings.append(
            f"{len(run.evicted)} attempts had their spans evicted by the store before "
            "collect read them; collect more often (the in-memory store evicts the oldest "
            "rollouts under memory pressure)"
        )
    redaction = {"enabled": config.redact, "values_redacted": run.redactor.count}
    seconds = {"connect": t_open - t_start, "list": run.list_seconds, "fetch": t_fetch - t_open}

    has_new = bool(run.attempts) or bool(run.evicted)
    if not has_new:
        seconds["write"] = 0.0
        seconds["total"] = time.perf_counter() - t_start
        return CollectResult(None, None, src.description, counts, _rounded(seconds), [], warnings, redaction)

    files = list(span_entries)
    if run.attempts:
        files.insert(
            0,
            await asyncio.to_thread(
                write_table,
                run.storage,
                run.folder,
                "rollouts",
                bronze.rollouts_table(run.rollouts.values(), cid),
            ),
        )
        files.insert(
            1,
            await asyncio.to_thread(
                write_table, run.storage, run.folder, "attempts", bronze.attempts_table(run.attempts, cid)
            ),
        )
    seconds["write"] = time.perf_counter() - t_fetch
    seconds["total"] = time.perf_counter() - t_start
    manifest = CollectionManifest(
        collection_id=cid,
        created_at=created_at.isoformat(),
        finished_at=dt.datetime.now(dt.UTC).isoformat(),
        tag=config.tag,
        store_url=src.description,
        filters=config.filters(),
        counts=counts,
        seconds=_rounded(seconds),
        evicted=run.evicted,
        no_llm_spans_rollouts=run.no_llm[:100],
        redaction=redaction,
        warnings=warnings,
        concurrency=config.concurrency,
        versions=_versions(),
        extra=dict(config.extra),
        files=files,
    )
    await asyncio.to_thread(run.storage.commit_collection, run.folder, manifest)
    return CollectResult(
        cid, run.folder, src.description, counts, _rounded(seconds), run.evicted, warnings, redaction
    )


def _rounded(seconds: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 3) for k, v in seconds.items()}


def collect(
    source: Any,
    wh: Warehouse,
    config: CollectConfig | None = None,
    progress: Progress | None = None,
    on_wait: Callable[[str], None] | None = None,
) -> CollectResult:
    """Collect new rollouts from ``source`` (a store URL or a LightningStore) into ``wh``.

    Commits one new collection and then builds its silver tables (unless
    ``config.silver`` is off), or commits nothing when every matching attempt is
    already in the warehouse. Raises StoreUnreachableError, StoreRequestError
    or CollectUsageError (all TracebankErrors) with nothing committed. One collect of a
    warehouse runs at a time: another waits (``on_wait`` is told for whom, once).
    """
    run = collect_async(source, wh, config, progress, on_wait)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run)
    # Called from inside a running loop (a notebook): run on a thread with a loop of its own.
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, run).result()
