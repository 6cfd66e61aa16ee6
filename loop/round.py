"""One serving round, the unit both ``tracebank round`` and the Algorithm repeat.

:func:`serve_round` is the recipe's ``sft_one_iter`` with the data kept:

1. serve the model (``vllm serve`` with the recipe's flags, or the CPU server) and wait for health;
2. point an LLM proxy at it (tracebank's, which records spans on every otel version; or the
   Trainer's, given a new model list and restarted) and publish it as the ``main_llm`` resource;
3. enqueue one rollout per task, tied to that resource, and poll ``wait_for_rollouts`` with
   ``timeout=0`` (the only wait a remote store serves) until all are done or the round times out;
4. wait until the proxy's spans have arrived (it exports a call after answering it);
5. stop the server (freeing the GPU for training);
6. chain collect (this round's rollouts only, tagged) -> transform (a new version of one
   dataset, from this round's collection) -> train (the served model into the next one).

:func:`run_round` is the synchronous entry for a store URL.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracebank.loop.config import RoundConfig
from tracebank.loop.errors import LoopError, LoopUsageError, NoSucceededRolloutsError, RoundTimeoutError
from tracebank.loop.servers import check_model_dir, launch, served_name
from tracebank.warehouse.events import (
    Collected,
    Event,
    OnEvent,
    ProxyReady,
    RolledOut,
    RolloutProgress,
    ServerReady,
    ServerStarting,
    Trained,
    TrainingStarted,
    Transformed,
)
from tracebank.warehouse.layout import Warehouse

if TYPE_CHECKING:
    from tracebank.collect import CollectResult
    from tracebank.train import RunRecord
    from tracebank.transform import TransformResult

TERMINAL = ("succeeded", "failed", "cancelled")


@dataclass
class RoundResult:
    """What one round did: what it served, how its rollouts ended, and what each chained stage made."""

    model: str
    """The model folder that was served."""
    served_model: str
    """The name the model server answered to."""
    server_command: list[str]
    """The command line the model server was started with."""
    proxy_model_list: list[dict[str, Any]]
    """The LiteLLM model list the proxy forwarded with."""
    resources_id: str
    """The store's id of the published proxy resource."""
    rollout_ids: list[str]
    """The rollouts enqueued, in task order."""
    statuses: dict[str, int]
    """Rollouts per final status."""
    iteration: int | None = None
    """The Algorithm's iteration, None for a standalone round."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Wall time of each step."""
    collection: CollectResult | None = None
    """The collect result (``--then collect`` and later)."""
    dataset: TransformResult | None = None
    """The dataset version written (``--then transform`` and later)."""
    run: RunRecord | None = None
    """The training run (``--then train``)."""

    @property
    def next_model(self) -> str | None:
        """The trained model folder the next round serves."""
        return self.run.output_dir if self.run is not None else None


def next_model_path(model: str | Path) -> Path:
    """``…/version_3`` -> ``…/version_4`` (the recipe's naming); any other folder gets ``-r1``, ``-r2``…"""
    path = Path(model)
    m = re.fullmatch(r"(.*?)([_-]r?)(\d+)", path.name)
    if m:
        return path.with_name(f"{m[1]}{m[2]}{int(m[3]) + 1}")
    return path.with_name(f"{path.name}-r1")


def load_tasks(path: str | Path) -> list[Any]:
    """The tasks of a JSONL file (one JSON value per line; blank lines skipped)."""
    import json

    path = Path(path)
    if not path.is_file():
        raise LoopUsageError(
            f"tasks file {path} does not exist", "pass --tasks a JSONL file, one task per line"
        )
    tasks = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                tasks.append(json.loads(line))
            except ValueError as exc:
                raise LoopUsageError(f"{path}:{n} is not JSON: {exc}", "one JSON task per line") from None
    if not tasks:
        raise LoopUsageError(f"tasks file {path} has no tasks", "one JSON task per line")
    return tasks


async def _blocking(
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


def _check_proxy(proxy: Any) -> None:
    """Refuse a stock LLMProxy where it would silently lose every span (otel >= 1.44)."""
    from tracebank.serve.proxy import TracebankLLMProxy, otlp_exporter_binds_endpoint_at_init

    if not isinstance(proxy, TracebankLLMProxy) and otlp_exporter_binds_endpoint_at_init():
        raise LoopUsageError(
            f"the Trainer's {type(proxy).__name__} would export no span to the store with this "
            "opentelemetry (>= 1.44 binds the OTLP endpoint when the exporter is built)",
            "pass llm_proxy=serve.proxy.TracebankLLMProxy(port=...) to agl.Trainer instead",
        )


async def _enqueue(store: Any, tasks: list[Any], mode: str, resources_id: str) -> list[str]:
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


async def _wait_for_rollouts(
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


async def _settle_spans(store: Any, rollouts: Sequence[Any], config: RoundConfig) -> dict[str, int]:
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


async def serve_round(
    store: Any,
    tasks: Sequence[Any],
    model: str | Path,
    config: RoundConfig,
    *,
    wh: Warehouse | None = None,
    proxy: Any = None,
    iteration: int | None = None,
    output_model: str | Path | None = None,
    on_event: OnEvent | None = None,
) -> RoundResult:
    """Run one round against ``store`` (a LightningStore object, e.g. a LightningStoreClient).

    ``proxy``: an LLMProxy to reuse (the Trainer's); None starts a TracebankLLMProxy for the
    round and stops it after. ``output_model``: where ``--then train`` writes the next model
    (``next_model_path(model)`` when None). Raises TracebankErrors; the server is stopped
    whatever happens.
    """
    from tracebank.serve.config import ProxyConfig
    from tracebank.serve.proxy import model_list, start_llm_proxy

    emit: OnEvent = on_event or (lambda event: None)
    config = config.validate()
    tasks = list(tasks)
    if not tasks:
        raise LoopUsageError("no tasks to roll out", "pass at least one task")
    model_path = check_model_dir(Path(model))
    stages = config.stages
    if stages.includes("collect") and wh is None:
        raise LoopUsageError(f"--then {stages.then} needs a warehouse")
    if proxy is not None:
        _check_proxy(proxy)
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    log_dir = config.log_dir or (wh.tmp_dir / "round-logs" if wh is not None else None)
    log_path = (
        log_dir / f"{config.server.kind}-server-{time.strftime('%Y%m%d-%H%M%S')}.log" if log_dir else None
    )
    name = served_name(model_path, config.server)
    emit(ServerStarting(str(model_path), config.server.kind, str(log_path) if log_path else None))
    starting = threading.Event()
    server = await _blocking(
        launch,
        model_path,
        config.server,
        log_path,
        starting,
        cancel=starting,
        abandon=lambda started: started.stop(),
    )
    own_proxy = proxy is None
    started_proxy = None
    try:
        seconds["serve"] = time.perf_counter() - t0
        emit(ServerReady(server.base_url, seconds["serve"]))
        proxy_config = ProxyConfig(
            backend_url=server.base_url,
            backend_model=name,
            model_name=config.proxy_model_name,
            port=config.proxy_port,
        )
        models = model_list(proxy_config)
        t = time.perf_counter()
        if own_proxy:
            proxy = started_proxy = await start_llm_proxy(store, proxy_config)
        else:
            if proxy.get_store() is None:
                proxy.set_store(store)
            proxy.update_model_list(models)
            await proxy.restart()
        seconds["proxy"] = time.perf_counter() - t
        resources = await store.add_resources({config.resource_name: proxy.as_resource()})
        emit(ProxyReady(proxy.as_resource().get_base_url(None, None), resources.resources_id))
        t = time.perf_counter()
        rollout_ids = await _enqueue(store, tasks, config.mode, resources.resources_id)
        finished = await _wait_for_rollouts(store, rollout_ids, config, emit)
        seconds["rollouts"] = time.perf_counter() - t
        t = time.perf_counter()
        spans = await _settle_spans(store, finished, config)
        seconds["settle"] = time.perf_counter() - t
    finally:
        server.stop()
        if started_proxy is not None and started_proxy.is_running():
            await started_proxy.stop()
    statuses: dict[str, int] = {}
    for r in finished:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    result = RoundResult(
        model=str(model_path),
        served_model=name,
        server_command=list(server.process.args),
        proxy_model_list=models,
        resources_id=resources.resources_id,
        rollout_ids=rollout_ids,
        statuses=statuses,
        iteration=iteration,
        seconds=seconds,
    )
    emit(RolledOut(statuses, sum(spans.values()), seconds["rollouts"]))
    if stages.includes("collect"):
        assert wh is not None
        await _chain(store, wh, result, config, output_model, emit)
    result.seconds["total"] = time.perf_counter() - t0
    return result


async def _chain(
    store: Any,
    wh: Warehouse,
    result: RoundResult,
    config: RoundConfig,
    output_model: str | Path | None,
    emit: OnEvent,
) -> None:
    """collect -> transform -> train, as far as ``config.stages.then`` asks."""
    from tracebank.collect import CollectConfig, collect_async

    stages = config.stages
    if not result.statuses.get("succeeded"):
        raise NoSucceededRolloutsError(
            f"none of the round's {len(result.rollout_ids)} rollouts succeeded ({_fmt(result.statuses)})",
            "see the runners' logs: the agent raised on every task",
        )
    t = time.perf_counter()
    extra = {
        "round": {
            "model": result.model,
            "served_model": result.served_model,
            "iteration": result.iteration,
            "resources_id": result.resources_id,
        }
    }
    result.collection = await collect_async(
        store, wh, CollectConfig(rollout_ids=tuple(result.rollout_ids), tag=stages.tag, extra=extra)
    )
    result.seconds["collect"] = time.perf_counter() - t
    emit(Collected(result.collection.summary(), result.collection.collection_id))
    if not stages.includes("transform"):
        return
    if not result.collection.committed:
        raise LoopError(
            "the round's rollouts were already collected, so there is nothing new to transform",
            "run `tracebank transform` on the existing collection instead",
        )
    from tracebank.transform import transform

    t = time.perf_counter()
    assert result.collection.collection_id is not None
    tconfig = replace(
        stages.transform,
        collections=(result.collection.collection_id,),
        extra={**stages.transform.extra, "round": extra["round"]},
    )
    # A cancelled round waits for the transform to finish: it commits whole or not at all.
    result.dataset = await _blocking(transform, wh, tconfig)
    result.seconds["transform"] = time.perf_counter() - t
    emit(Transformed(result.dataset.summary(), str(result.dataset.ref)))
    if not stages.includes("train"):
        return
    from tracebank.train import train

    t = time.perf_counter()
    output = Path(output_model) if output_model is not None else next_model_path(result.model)
    train_config = replace(
        stages.train, dataset=str(result.dataset.ref), base_model=result.model, output=str(output)
    )
    emit(TrainingStarted(str(result.dataset.ref), str(output)))
    stop = threading.Event()

    def on_train_event(event: Event) -> None:
        # train() calls this from its event pump: raising here makes it kill the training child
        # and record the run failed ("interrupted") instead of publishing a model nobody waits for.
        if stop.is_set():
            raise KeyboardInterrupt
        emit(event)

    result.run = await _blocking(train, wh, train_config, on_train_event, cancel=stop)
    result.seconds["train"] = time.perf_counter() - t
    emit(Trained(result.run.run_id, result.run.output_dir, result.iteration))


def _fmt(statuses: dict[str, int]) -> str:
    return ", ".join(f"{n} {s}" for s, n in sorted(statuses.items())) or "none finished"


def run_round(
    store_url: str,
    tasks: Sequence[Any],
    model: str | Path,
    config: RoundConfig | None = None,
    *,
    wh: Warehouse | None = None,
    output_model: str | Path | None = None,
    on_event: OnEvent | None = None,
) -> RoundResult:
    """One round against the store at ``store_url``; see :func:`serve_round`.

    The agent runs in agentlightning runners connected to the same store (your
    own, as in the recipe's ``sft_rollout_runners.py``, or :class:`loop.runners.LocalRunners`).
    """
    from tracebank.collect.source import check_url

    url = check_url(store_url)
    config = (config or RoundConfig()).validate()
    model = check_model_dir(Path(model))
    if config.server.kind == "vllm":
        from tracebank.loop.servers import vllm_executable

        vllm_executable()  # before anything starts: a machine without vLLM fails in a second

    async def main() -> RoundResult:
        from agentlightning import LightningStoreClient

        await _check_store(url)
        store = LightningStoreClient(url)
        try:
            return await serve_round(
                store, tasks, model, config, wh=wh, output_model=output_model, on_event=on_event
            )
        finally:
            await store.close()

    return asyncio.run(main())


async def _check_store(url: str) -> None:
    """A quick reachability check, so a wrong URL fails in seconds, before any server starts."""
    import urllib.error
    import urllib.request

    def probe() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/v1/agl/health", timeout=3) as resp:
                return bool(resp.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    if not await asyncio.to_thread(probe):
        raise LoopError(
            f"no agentlightning store answers at {url}",
            "start one with `agl store --port 4747` and pass --store http://HOST:4747",
        )
