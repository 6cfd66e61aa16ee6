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
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tracebank.core.events import (
    OnEvent,
    ProxyReady,
    RolledOut,
    ServerReady,
    ServerStarting,
)
from tracebank.loop.cancel import run_blocking
from tracebank.loop.chain import chain
from tracebank.loop.config import RoundConfig
from tracebank.loop.errors import LoopUsageError
from tracebank.loop.result import RoundResult
from tracebank.loop.servers import check_model_dir, launch, served_name
from tracebank.loop.store_protocol import check_store, enqueue, settle_spans, wait_for_rollouts
from tracebank.warehouse.location import Warehouse


def _check_proxy(proxy: Any) -> None:
    """Refuse a stock LLMProxy where it would silently lose every span (otel >= 1.44)."""
    from tracebank.serve.proxy import TracebankLLMProxy, otlp_exporter_binds_endpoint_at_init

    if not isinstance(proxy, TracebankLLMProxy) and otlp_exporter_binds_endpoint_at_init():
        raise LoopUsageError(
            f"the Trainer's {type(proxy).__name__} would export no span to the store with this "
            "opentelemetry (>= 1.44 binds the OTLP endpoint when the exporter is built)",
            "pass llm_proxy=serve.proxy.TracebankLLMProxy(port=...) to agl.Trainer instead",
        )


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
    server = await run_blocking(
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
        rollout_ids = await enqueue(store, tasks, config.mode, resources.resources_id)
        finished = await wait_for_rollouts(store, rollout_ids, config, emit)
        seconds["rollouts"] = time.perf_counter() - t
        t = time.perf_counter()
        spans = await settle_spans(store, finished, config)
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
        await chain(store, wh, result, config, output_model, emit)
    result.seconds["total"] = time.perf_counter() - t0
    return result


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
        from tracebank.loop.servers import check_vllm

        check_vllm(model, config.server)  # before anything starts: a model vLLM cannot serve fails now

    async def main() -> RoundResult:
        from agentlightning import LightningStoreClient

        await check_store(url)
        store = LightningStoreClient(url)
        try:
            return await serve_round(
                store, tasks, model, config, wh=wh, output_model=output_model, on_event=on_event
            )
        finally:
            await store.close()

    return asyncio.run(main())
