"""The one renderer of the stages' progress events (tracebank.core.events), on stderr.

On a terminal, rollouts and training steps are live bars and every other event is a line
above them; elsewhere (CI logs, a pipe) every event is a plain line that starts with the
seconds elapsed, so a log shows progress and pace without control characters. Control
characters inside an event's text (an id or message from a trace) are shown, never obeyed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from functools import singledispatch
from typing import Any, TextIO

from tracebank.core import events as ev
from tracebank.core.text import loss, visible


@singledispatch
def describe(event: ev.Event, max_steps: int | None = None) -> str | None:
    """The line an event prints; None for one that shows as a bar or not at all."""
    return None


@describe.register
def _(event: ev.RescoreProgress, max_steps: int | None = None) -> str:
    failed = f", {event.failed} failed" if event.failed else ""
    return f"rescored {event.done}/{event.total} rollouts: {event.scored} scored{failed}"


@describe.register
def _(event: ev.ModelReady, max_steps: int | None = None) -> str:
    return ("built the tiny model " if event.built else "starting from ") + event.model


@describe.register
def _(event: ev.StoreStarted, max_steps: int | None = None) -> str:
    return f"agl store running at {event.url}"


@describe.register
def _(event: ev.IterationStarted, max_steps: int | None = None) -> str:
    return f"serve {event.model} -> train {event.output}"


@describe.register
def _(event: ev.ServerStarting, max_steps: int | None = None) -> str:
    log = f" (log {event.log})" if event.log else ""
    return f"starting the {event.server} model server{log}"


@describe.register
def _(event: ev.ServerReady, max_steps: int | None = None) -> str:
    return f"model server healthy at {event.url} after {event.seconds:.1f}s"


@describe.register
def _(event: ev.ProxyReady, max_steps: int | None = None) -> str:
    return f"LLM proxy at {event.url}, published as resource {event.resources_id}"


@describe.register
def _(event: ev.RolloutProgress, max_steps: int | None = None) -> str:
    failed = f", {event.failed} failed" if event.failed else ""
    return f"rollouts {event.done}/{event.total} ({event.succeeded} ok{failed})"


@describe.register
def _(event: ev.EnvironmentBuild, max_steps: int | None = None) -> str:
    return event.line


@describe.register
def _(event: ev.WaitingForWarehouse, max_steps: int | None = None) -> str:
    return event.note


@describe.register
def _(event: ev.SilverBuilt, max_steps: int | None = None) -> str:
    return f"silver of {event.collection_id}: {event.summary}"


@describe.register
def _(event: ev.RolledOut, max_steps: int | None = None) -> str:
    statuses = ", ".join(f"{n} {s}" for s, n in sorted(event.statuses.items()))
    return (
        f"rollouts done in {event.seconds:.1f}s: {statuses}; {event.spans} spans in the store; "
        "model server stopped"
    )


@describe.register
def _(event: ev.Collected, max_steps: int | None = None) -> str:
    return event.summary


@describe.register
def _(event: ev.Transformed, max_steps: int | None = None) -> str:
    return event.summary


@describe.register
def _(event: ev.TrainingStarted, max_steps: int | None = None) -> str:
    return f"training on {event.dataset} into {event.output}"


@describe.register
def _(event: ev.Trained, max_steps: int | None = None) -> str:
    return f"run {event.run_id} succeeded: {event.output}"


@describe.register
def _(event: ev.RunStarted, max_steps: int | None = None) -> str:
    return f"run {event.run_id}: training on {event.dataset}"


@describe.register
def _(event: ev.RunChecked, max_steps: int | None = None) -> str:
    rows = ", ".join(f"{n} {split}" for split, n in event.rows.items())
    truncated = f", {event.truncated_rows} row(s) truncated" if event.truncated_rows else ""
    return f"checked: {rows} rows, max length {event.max_length} tokens{truncated}"


@describe.register
def _(event: ev.ModelLoaded, max_steps: int | None = None) -> str:
    r = event.resolved
    precision = "bf16" if r["bf16"] else "fp32"
    four_bit = ", 4-bit base" if r["load_in_4bit"] else ""
    line = (
        f"backend {r['backend']} on {r['device']} ({precision}, {r['optim']}{four_bit}): "
        f"{event.trainable_params:,} trainable of {event.total_params:,} parameters "
        f"({event.trainable_percent:.2f}%)"
    )
    return line + (f"\nnote: {event.note}" if event.note else "")


@describe.register
def _(event: ev.MetricLogged, max_steps: int | None = None) -> str:
    m = event.metric
    of = f"/{max_steps}" if max_steps else ""
    epoch = f"  epoch {m.epoch:.2f}" if m.epoch is not None else ""
    if m.split == "train":
        lr = f"  lr {m.learning_rate:.2e}" if m.learning_rate is not None else ""
        return f"step {m.step}{of}{epoch}  loss {loss(m.loss)}{lr}"
    return f"eval at step {m.step}{of}{epoch}  eval_loss {loss(m.loss)}"


@describe.register
def _(event: ev.ModelSaved, max_steps: int | None = None) -> str:
    return f"saved {event.save}" + (f" ({event.dtype})" if event.dtype else "")


class Progress:
    """Renders events on ``stream`` (stderr): live bars on a terminal, timed lines elsewhere.

    ``live`` defaults to whether ``stream`` is a terminal; ``clock`` gives the seconds the
    plain lines show (time since this renderer was made).
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        live: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.clock = clock
        self.started = clock()
        self.iteration: int | None = None
        self.max_steps: int | None = None
        self.bars: Any = None
        self.tasks: dict[str, Any] = {}

    def __call__(self, event: ev.Event) -> None:
        if isinstance(event, ev.IterationStarted):
            self.iteration = event.iteration
        if isinstance(event, ev.TrainBegin):
            self.max_steps = event.max_steps
        if self.live and self._update_bar(event):
            return
        text = describe(event, self.max_steps)
        if text is not None:
            self.line(text)

    def line(self, text: str) -> None:
        """Print ``text`` (one line or several) with the iteration and, off a terminal, the time."""
        prefix = f"[iter {self.iteration}] " if self.iteration is not None else ""
        if not self.live:
            prefix = f"[{self.clock() - self.started:7.1f}s] {prefix}"
        for line in text.splitlines():
            part = visible(line, keep="\t")  # event text may carry trace text (ids, messages)
            if self.bars is not None:
                self.bars.console.print(prefix + part, markup=False, highlight=False)
            else:
                print(prefix + part, file=self.stream, flush=True)

    def _update_bar(self, event: ev.Event) -> bool:
        if isinstance(event, ev.RolloutProgress):
            failed = f", {event.failed} failed" if event.failed else ""
            self._bar("rollouts", event.total, event.done, f"{event.succeeded} ok{failed}")
            return True
        if isinstance(event, ev.CollectProgress):  # a bar only: off a terminal, one per page is noise
            self._bar("collecting", max(event.total, 1), event.done, "")
            return True
        if isinstance(event, ev.RescoreProgress):
            failed = f", {event.failed} failed" if event.failed else ""
            self._bar("rescored", event.total, event.done, f"{event.scored} scored{failed}")
            return True
        if isinstance(event, ev.MetricLogged) and event.metric.split == "train" and self.max_steps:
            m = event.metric
            self._bar("train steps", self.max_steps, m.step, f"loss {loss(m.loss)}")
            return True
        return False

    def _bar(self, name: str, total: int, done: int, detail: str) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as Bars

        if self.bars is None:
            self.bars = Bars(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[detail]}"),
                TimeElapsedColumn(),
                console=Console(file=self.stream),
            )
            self.bars.start()
        if name not in self.tasks:
            self.tasks[name] = self.bars.add_task(name, total=total, detail="")
        self.bars.update(self.tasks[name], total=total, completed=done, detail=detail)
        if done >= total:
            self.tasks.pop(name)
            if not self.tasks:
                self.close()

    def close(self) -> None:
        """Stop the bars (the last state stays on screen)."""
        if self.bars is not None:
            self.bars.stop()
            self.bars = None
            self.tasks = {}
