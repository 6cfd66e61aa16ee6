"""The stages a round chains after its rollouts: collect -> transform -> train."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracebank.core.events import Collected, Event, OnEvent, Trained, TrainingStarted, Transformed
from tracebank.loop.cancel import run_blocking
from tracebank.loop.config import RoundConfig
from tracebank.loop.errors import LoopError, NoSucceededRolloutsError
from tracebank.loop.servers import next_model_path
from tracebank.warehouse.location import Warehouse

if TYPE_CHECKING:
    from tracebank.loop.result import RoundResult


async def chain(
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
    result.dataset = await run_blocking(transform, wh, tconfig)
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

    result.run = await run_blocking(train, wh, train_config, on_train_event, cancel=stop)
    result.seconds["train"] = time.perf_counter() - t
    emit(Trained(result.run.run_id, result.run.output_dir, result.iteration))


def _fmt(statuses: dict[str, int]) -> str:
    return ", ".join(f"{n} {s}" for s, n in sorted(statuses.items())) or "none finished"
