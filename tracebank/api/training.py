"""Warehouse methods that train: a run on a dataset version, its resumption, its records, and
whole serving rounds (serve, roll out, collect, transform, train)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracebank.api.base import Handle
from tracebank.api.options import build_config
from tracebank.core.loops import outside_event_loop

if TYPE_CHECKING:
    from tracebank.core.events import OnEvent
    from tracebank.loop import DemoResult, RoundConfig, RoundResult
    from tracebank.warehouse.query import ResultRows
    from tracebank.warehouse.records import RunRecord


class TrainMethods(Handle):
    def train(self, dataset: str, *, on_event: OnEvent | None = None, **options: Any) -> RunRecord:
        """Train a LoRA adapter (or the whole model) on dataset version ``dataset`` and record the run.

        Keywords are :class:`~tracebank.train.TrainConfig`'s, as ``tracebank train`` takes them
        (``base_model``, ``output``, ``max_steps``, ``learning_rate``, ``method``...).
        """
        from tracebank.train import TrainConfig, train

        config = build_config(TrainConfig, {"dataset": dataset, **options}, "train")
        return train(self.readable(), config, on_event=on_event)

    def resume(self, run_id: str, *, output: str | None = None, on_event: OnEvent | None = None) -> RunRecord:
        """Continue a failed or interrupted run from its last checkpoint, with its recorded settings
        (``output``: into a new folder instead of the recorded one)."""
        from tracebank.train import resume

        return resume(self.readable(), run_id, on_event=on_event, output=output)

    def runs(self, status: str | None = None) -> ResultRows:
        """One row per run (of ``status`` only, when given), oldest first."""
        from tracebank.train import runs_table

        return runs_table(self.readable(), status)

    def run(self, run_id: str) -> dict[str, Any]:
        """A run's record (an id prefix is enough) with its metric events under ``metrics``."""
        from tracebank.train import run_details

        return run_details(self.readable(), run_id)

    def round(
        self,
        store_url: str,
        tasks: Sequence[Any] | str | Path,
        model: str | Path,
        config: RoundConfig | None = None,
        *,
        output_model: str | Path | None = None,
        runners: Any = None,
        on_event: OnEvent | None = None,
    ) -> RoundResult:
        """One serving round against the ``agl store`` at ``store_url``: serve ``model``, enqueue
        ``tasks`` (a list, or a JSONL/JSON file), wait, stop, then collect, transform and train as
        ``config.stages.then`` says (into this warehouse). ``runners``: an agent to roll the tasks
        out with in local runners (``"module:agent"`` or an agent), else your own runners do."""
        import contextlib

        from tracebank.loop import LocalRunners, RoundConfig, load_agent, load_tasks, run_round

        config = (config or RoundConfig()).validate()
        task_list = load_tasks(str(tasks)) if isinstance(tasks, str | Path) else tasks
        wh = self.writable() if config.stages.then != "none" else None
        local: Any = contextlib.nullcontext()
        if runners is not None:
            agent, count = runners if isinstance(runners, tuple) else (runners, 1)
            local = LocalRunners(store_url, load_agent(agent) if isinstance(agent, str) else agent, n=count)
        with local:
            return outside_event_loop(
                lambda: run_round(
                    store_url, task_list, model, config, wh=wh, output_model=output_model, on_event=on_event
                )
            )

    def demo(self, *, on_event: OnEvent | None = None, **options: Any) -> DemoResult:
        """The whole loop on this machine: ``agl store``, a tiny model served behind a real LLM
        proxy, a toy agent, then collect, transform and train. Keywords: ``DemoConfig``'s."""
        from tracebank.loop import DemoConfig
        from tracebank.loop.demo import run_demo

        config = build_config(DemoConfig, options, "demo")
        return run_demo(self, config, on_event=on_event)
