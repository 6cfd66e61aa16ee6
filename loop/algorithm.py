"""The recipe's ``UnslothSupervisedFinetuning`` as an agentlightning Algorithm backed by the warehouse.

Each iteration is one :func:`loop.round.serve_round` with ``--then train``:
serve the current model, publish the proxy, enqueue the tasks, wait, stop the
server, collect this iteration's rollouts (tag ``iter-N``), write a new version
of one dataset, train (Unsloth on CUDA when installed, else TRL+PEFT) into
``version_<N+1>``, and serve that next. Unlike the recipe, the spans, the
dataset version and the run of every iteration stay in the warehouse::

    algo = WarehouseSupervisedFinetuning("warehouse", "models/version_0", AlgorithmConfig(iterations=2))
    trainer = agl.Trainer(algorithm=algo, n_runners=4, llm_proxy=TracebankLLMProxy(port=12358))
    trainer.fit(math_agent, tasks)
    algo.final_model  # models/version_2

``llm_proxy`` may be left out (each iteration then starts its own
TracebankLLMProxy); a stock ``agl.LLMProxy`` is refused where the installed
opentelemetry would make it drop every span. The class subclasses
``agl.Algorithm``, so it is built on first access (agentlightning is slow to
import); ``from loop.algorithm import WarehouseSupervisedFinetuning`` does that.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path
from typing import Any

from tracebank.core.events import IterationStarted, OnEvent
from tracebank.loop.config import AlgorithmConfig
from tracebank.loop.errors import LoopUsageError
from tracebank.loop.result import RoundResult
from tracebank.loop.round import serve_round
from tracebank.loop.servers import next_model_path
from tracebank.warehouse.backends import open_warehouse
from tracebank.warehouse.location import Warehouse

CLASS_NAMES = ("WarehouseSupervisedFinetuning",)


async def run_iterations(
    store: Any,
    proxy: Any,
    tasks: list[Any],
    wh: Warehouse,
    initial_model: Path,
    config: AlgorithmConfig,
    results: list[RoundResult],
    on_event: OnEvent | None = None,
) -> Path:
    """The Algorithm's loop: ``config.iterations`` rounds, each serving the model the last one trained.

    Appends each round's result to ``results`` as it finishes; returns the last model.
    """
    emit: OnEvent = on_event or (lambda event: None)
    model = Path(initial_model)
    models_dir = Path(config.models_dir) if config.models_dir is not None else model.parent
    try:
        for i in range(config.iterations):
            round_config = config.round.with_stages(then="train", tag=f"iter-{i}")
            output = models_dir / next_model_path(model).name
            emit(IterationStarted(i, str(model), str(output)))

            result = await serve_round(
                store,
                tasks,
                model,
                round_config,
                wh=wh,
                proxy=proxy,
                iteration=i,
                output_model=output,
                on_event=emit,
            )
            results.append(result)
            assert result.next_model is not None
            model = Path(result.next_model)
    finally:
        if proxy is not None and proxy.is_running():
            await proxy.stop()
    return model


@functools.cache
def _classes() -> dict[str, type]:
    import agentlightning as agl

    class WarehouseSupervisedFinetuning(agl.Algorithm):  # type: ignore[misc]
        """Iterated SFT on the agent's own best rollouts, every iteration's data kept in the warehouse.

        Args:
            warehouse: the warehouse folder (or a Warehouse).
            initial_model: the model folder the first iteration serves (``models/version_0``).
            config: iterations, where models go, and the settings of each round.
            on_event: called with typed progress events (tracebank.core.events).
            close_store: close the store client at the end of ``run`` (when the caller made it
                for this Algorithm alone; its HTTP sessions belong to ``run``'s event loop).
        """

        def __init__(
            self,
            warehouse: Warehouse | str | Path,  # a folder or s3://bucket/prefix
            initial_model: str | Path,
            config: AlgorithmConfig | None = None,
            on_event: OnEvent | None = None,
            close_store: bool = False,
        ) -> None:
            super().__init__()
            self.warehouse = warehouse if isinstance(warehouse, Warehouse) else open_warehouse(warehouse)
            self.initial_model = Path(initial_model)
            self.config = (config or AlgorithmConfig()).validate()
            self.on_event = on_event
            self.close_store = close_store
            #: One RoundResult per finished iteration.
            self.results: list[RoundResult] = []
            #: True once every iteration finished (the Trainer swallows Ctrl-C, so check this).
            self.completed = False

        @property
        def final_model(self) -> Path | None:
            """The model the last finished iteration trained."""
            return Path(self.results[-1].next_model) if self.results and self.results[-1].next_model else None

        async def run(self, train_dataset: Any = None, val_dataset: Any = None) -> None:
            """Run the iterations on ``train_dataset`` (the tasks); ``val_dataset`` is not used."""
            if train_dataset is None or len(train_dataset) == 0:
                raise LoopUsageError("the Algorithm has no tasks", "call trainer.fit(agent, tasks)")
            tasks = [train_dataset[i] for i in range(len(train_dataset))]
            self.warehouse.init()
            store = self.get_store()
            try:
                await run_iterations(
                    store,
                    self.get_llm_proxy(),
                    tasks,
                    self.warehouse,
                    self.initial_model,
                    self.config,
                    self.results,
                    self.on_event,
                )
            finally:
                if self.close_store:
                    await store.close()
            self.completed = True

        def with_config(self, **changes: Any) -> WarehouseSupervisedFinetuning:
            """A new Algorithm with some AlgorithmConfig fields changed."""
            return type(self)(
                self.warehouse,
                self.initial_model,
                replace(self.config, **changes),
                self.on_event,
                self.close_store,
            )

    WarehouseSupervisedFinetuning.__module__ = __name__
    return {"WarehouseSupervisedFinetuning": WarehouseSupervisedFinetuning}


def __getattr__(name: str) -> Any:
    if name in CLASS_NAMES:
        cls = _classes()[name]
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
