"""Typed progress events of every stage, and the one metric record of a training step or evaluation.

The single owner of these shapes: stages emit them, the training child sends them as JSON
lines (``to_dict``/``event_from_dict``), ``train`` writes :class:`Metric` rows to
``run_metrics``, and the CLI renders them (``tracebank.cli.progress``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar


@dataclass(frozen=True)
class Metric:
    """One training log or evaluation: a row of ``run_metrics`` (and a line of metrics.jsonl)."""

    step: int
    """Optimizer steps done when it was logged."""
    split: str
    """``train`` (a training log) or ``eval`` (an evaluation of the validation split)."""
    loss: float | None
    """Mean loss over the logged steps, or the evaluation loss."""
    epoch: float | None = None
    """Fractional epoch at the time of the log."""
    learning_rate: float | None = None
    """Learning rate at the step (training logs only)."""
    grad_norm: float | None = None
    """Gradient norm before clipping (training logs only)."""
    tokens: int | None = None
    """Tokens seen so far, as TRL counts them."""
    time: float | None = None
    """Seconds since training began."""
    token_accuracy: float | None = None
    """Share of trained tokens predicted right (TRL's mean_token_accuracy)."""
    rewards_chosen: float | None = None
    """DPO: mean implicit reward of the chosen answers (beta times their log-ratio to the reference)."""
    rewards_rejected: float | None = None
    """DPO: mean implicit reward of the rejected answers."""
    rewards_margin: float | None = None
    """DPO: mean of chosen minus rejected reward."""
    rewards_accuracy: float | None = None
    """DPO: share of pairs whose chosen reward is higher."""

    FIELDS: ClassVar[tuple[str, ...]] = (
        "step",
        "epoch",
        "split",
        "loss",
        "learning_rate",
        "grad_norm",
        "tokens",
        "time",
        "token_accuracy",
        "rewards_chosen",
        "rewards_rejected",
        "rewards_margin",
        "rewards_accuracy",
    )

    def to_dict(self) -> dict[str, Any]:
        """The record as run_metrics stores it, in its column order."""
        return {name: getattr(self, name) for name in self.FIELDS}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Metric:
        """The record from a dict holding at least step, split and loss; other keys are ignored."""
        values: dict[str, Any] = {name: data.get(name) for name in cls.FIELDS}
        return cls(**values)


@dataclass(frozen=True)
class Event:
    """A progress event; ``kind`` names it on the wire (``{"event": kind, ...}``)."""

    kind: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:
        """``{"event": kind, **fields}``; a Metric field is flattened into its columns."""
        out: dict[str, Any] = {"event": self.kind}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Metric):
                out.update(value.to_dict())
            else:
                out[f.name] = value
        return out


# Defined after Event (not as the string "Event"), so a reader of another module's annotations
# (pdoc, typing.get_type_hints) resolves it where ``OnEvent`` is imported.
OnEvent = Callable[[Event], None]
"""Signature of every stage's ``on_event`` callback."""


# --- the loop: a round, the Algorithm, the demo -------------------------------------------------


@dataclass(frozen=True)
class ModelReady(Event):
    """The demo's first model: built here, or found from an earlier run."""

    kind: ClassVar[str] = "model"
    model: str
    built: bool


@dataclass(frozen=True)
class StoreStarted(Event):
    """The demo's ``agl store`` answers."""

    kind: ClassVar[str] = "store"
    url: str


@dataclass(frozen=True)
class IterationStarted(Event):
    """An Algorithm iteration begins: serve ``model``, train into ``output``."""

    kind: ClassVar[str] = "iteration"
    iteration: int
    model: str
    output: str


@dataclass(frozen=True)
class ServerStarting(Event):
    """The model server of a round is starting."""

    kind: ClassVar[str] = "serving"
    model: str
    server: str
    log: str | None = None


@dataclass(frozen=True)
class ServerReady(Event):
    """The model server answers its health check."""

    kind: ClassVar[str] = "served"
    url: str
    seconds: float


@dataclass(frozen=True)
class ProxyReady(Event):
    """The LLM proxy is up and published in the store."""

    kind: ClassVar[str] = "proxy"
    url: str
    resources_id: str


@dataclass(frozen=True)
class RolloutProgress(Event):
    """Rollouts of the round finished so far."""

    kind: ClassVar[str] = "rollouts"
    done: int
    total: int
    succeeded: int
    failed: int


@dataclass(frozen=True)
class RescoreProgress(Event):
    """Archived rollouts a scorer has scored so far (tracebank rescore)."""

    kind: ClassVar[str] = "rescored"
    done: int
    total: int
    scored: int
    failed: int


@dataclass(frozen=True)
class EnvironmentBuild(Event):
    """A step of building the vLLM environment (once per machine, minutes): a command or a note."""

    kind: ClassVar[str] = "environment"
    line: str


@dataclass(frozen=True)
class CollectProgress(Event):
    """Attempts a collect has read so far, of those it knows of yet."""

    kind: ClassVar[str] = "collecting"
    done: int
    total: int


@dataclass(frozen=True)
class WaitingForWarehouse(Event):
    """Another writer holds the warehouse's collect claim: the method waits for it (said once)."""

    kind: ClassVar[str] = "waiting"
    holder: str
    """Who holds it, as ``Owner.describe`` says: ``collect (pid 12 on host-a)``."""

    @property
    def note(self) -> str:
        return f"waiting for {self.holder} to finish with this warehouse"


@dataclass(frozen=True)
class SilverBuilt(Event):
    """A collection's silver tables (llm_calls, rewards, messages) were built."""

    kind: ClassVar[str] = "silver"
    collection_id: str
    summary: str


@dataclass(frozen=True)
class RolledOut(Event):
    """Every rollout of the round finished; the model server is stopped."""

    kind: ClassVar[str] = "rolled_out"
    statuses: dict[str, int]
    spans: int
    seconds: float


@dataclass(frozen=True)
class Collected(Event):
    """The round's rollouts were collected."""

    kind: ClassVar[str] = "collected"
    summary: str
    collection_id: str | None


@dataclass(frozen=True)
class Transformed(Event):
    """The round's dataset version was written."""

    kind: ClassVar[str] = "transformed"
    summary: str
    dataset: str


@dataclass(frozen=True)
class TrainingStarted(Event):
    """The round starts training on ``dataset`` into ``output``."""

    kind: ClassVar[str] = "training"
    dataset: str
    output: str


@dataclass(frozen=True)
class Trained(Event):
    """The round's training run succeeded."""

    kind: ClassVar[str] = "trained"
    run_id: str
    output: str
    iteration: int | None = None


# --- training ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunStarted(Event):
    """A training run is recorded (status ``running``)."""

    kind: ClassVar[str] = "run"
    run_id: str
    dataset: str
    run_dir: str


@dataclass(frozen=True)
class RunChecked(Event):
    """The dataset version and the model passed the pre-flight checks."""

    kind: ClassVar[str] = "checked"
    run_id: str
    rows: dict[str, int]
    max_length: int
    truncated_rows: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ChildStarted(Event):
    """The training child process started."""

    kind: ClassVar[str] = "started"
    pid: int


@dataclass(frozen=True)
class ModelLoaded(Event):
    """The child loaded the model and attached LoRA."""

    kind: ClassVar[str] = "loaded"
    backend: str
    resolved: dict[str, Any]
    trainable_params: int
    total_params: int
    trainable_percent: float
    note: str | None = None
    pad_token_id: int | None = None
    """The tokenizer's padding id the model trains (and is saved) with: the eos id when it had none."""


@dataclass(frozen=True)
class TrainBegin(Event):
    """The trainer starts its first step."""

    kind: ClassVar[str] = "train_begin"
    max_steps: int | None
    epochs: float | None = None


@dataclass(frozen=True)
class MetricLogged(Event):
    """A training log or an evaluation (the Metric row train writes to run_metrics)."""

    kind: ClassVar[str] = "metric"
    metric: Metric


@dataclass(frozen=True)
class ModelSaved(Event):
    """The trained model was written to the staging folder."""

    kind: ClassVar[str] = "saved"
    save: str | None
    dtype: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckpointSaved(Event):
    """The child finished a resumable checkpoint (``--save-steps``) and marked it whole."""

    kind: ClassVar[str] = "checkpoint"
    step: int


@dataclass(frozen=True)
class ChildDone(Event):
    """The child trained and saved: its training stats and what it wrote (the run's result)."""

    kind: ClassVar[str] = "done"
    stats: dict[str, Any]
    saved: dict[str, Any] | None


#: Why a child failed: a TrainError it raised (``train``) or anything else (``crash``).
FAILURE_CAUSES = ("train", "crash")


@dataclass(frozen=True)
class ChildFailed(Event):
    """The child stopped on an error: ``cause`` is ``train`` (a TrainError, with its hint and exit
    code) or ``crash`` (any other exception: its type and first line; the traceback is in train.log)."""

    kind: ClassVar[str] = "error"
    cause: str
    message: str
    hint: str | None = None
    exit_code: int | None = None


@dataclass(frozen=True)
class RunFinished(Event):
    """The run succeeded and its model is published."""

    kind: ClassVar[str] = "finished"
    run_id: str
    status: str
    summary: dict[str, Any]
    output_dir: str


_KINDS: dict[str, type[Event]] = {
    cls.kind: cls
    for cls in (
        ModelReady,
        StoreStarted,
        IterationStarted,
        ServerStarting,
        ServerReady,
        ProxyReady,
        RolloutProgress,
        RescoreProgress,
        RolledOut,
        Collected,
        Transformed,
        TrainingStarted,
        Trained,
        RunStarted,
        RunChecked,
        ChildStarted,
        ModelLoaded,
        TrainBegin,
        MetricLogged,
        ModelSaved,
        CheckpointSaved,
        ChildDone,
        ChildFailed,
        RunFinished,
    )
}


def event_from_dict(data: Any) -> Event | None:
    """The typed event of a wire dict (``{"event": kind, ...}``); None for anything else (not an
    object, a kind no event has, a required field missing), which a reader skips.

    Keys the event has no field for go to its ``extra`` field where it has one (with what its own
    ``extra`` held, so ``event_from_dict(e.to_dict()) == e``), else are ignored.
    """
    if not isinstance(data, dict):
        return None
    cls = _KINDS.get(str(data.get("event")))
    if cls is None:
        return None
    if cls is MetricLogged:
        return MetricLogged(Metric.from_dict(data))
    fields = dataclasses.fields(cls)
    names = {f.name for f in fields}
    required = {
        f.name
        for f in fields
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    if not required <= data.keys():
        return None
    values = {k: v for k, v in data.items() if k in names and k != "extra"}
    if "extra" in names:
        own = data.get("extra")
        unknown = {k: v for k, v in data.items() if k not in names and k != "event"}
        values["extra"] = {**(own if isinstance(own, dict) else {}), **unknown}
    return cls(**values)
