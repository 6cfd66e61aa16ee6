"""Typed settings of a serving round, of the warehouse-backed Algorithm, and of the demo."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tracebank.loop.errors import LoopUsageError
from tracebank.serve.config import CpuServerConfig
from tracebank.train.config import TrainConfig
from tracebank.transform.config import TransformConfig

SERVERS = ("vllm", "cpu")
#: What a round chains after its rollouts, in order; each includes the ones before it.
THEN = ("none", "collect", "transform", "train")


@dataclass(frozen=True)
class ServerConfig:
    """How the model of a round is served: ``vllm serve`` (the recipe's flags) or tracebank's CPU server.

    The one server config of a round; ``servers.server_command`` turns it into a vLLM command
    line or a CpuServerConfig (whose fields are the CPU server's flags, one to one).
    """

    kind: str = "vllm"
    """vllm serve (a GPU), or tracebank's CPU server for small models."""
    host: str = CpuServerConfig.host
    """Address the model server binds; only the proxy talks to it."""
    port: int | None = None
    """Model server port; a free one when None."""
    served_model_name: str | None = None
    """Name the model is served as (default: the folder path, as vLLM does)."""
    tool_call_parser: str | None = "hermes"
    """vLLM ``--tool-call-parser`` (with ``--enable-auto-tool-choice``); None leaves tool calls off."""
    gpu_memory_utilization: float | None = None
    """vLLM GPU memory fraction; of host RAM on vLLM's CPU build (default: vLLM's; 0.15 on the CPU build)."""
    max_model_len: int | None = None
    """Prompt + completion token limit (default: the model's own)."""
    quantization: str | None = None
    """vLLM quantization, e.g. bitsandbytes to serve a 4-bit model (default: none)."""
    extra_args: tuple[str, ...] = ()
    """Further arguments appended to the server command line as they are."""
    startup_timeout_s: float = 900.0
    """Seconds the server may take to become healthy (vLLM compiles and captures graphs: minutes)."""
    default_max_tokens: int = CpuServerConfig.default_max_tokens
    """CPU server only: completion length when a request sets no ``max_tokens``."""
    threads: int | None = None
    """CPU server only: torch threads; torch's default when None."""
    vllm_python: Path | None = None
    """Python of an environment with vLLM (default: $TRACEBANK_VLLM_PYTHON, else the cached one,
    built on first use)."""
    enforce_eager: bool | None = None
    """vLLM --enforce-eager, no graph compilation (default: on for vLLM's CPU build, where
    compiling takes minutes)."""
    max_lora_rank: int | None = None
    """vLLM --max-lora-rank when serving a LoRA adapter folder (default: the smallest that fits
    the adapter)."""

    def validate(self) -> ServerConfig:
        if self.kind not in SERVERS:
            raise LoopUsageError(f"unknown server {self.kind!r}", f"use one of {', '.join(SERVERS)}")
        gpu = self.gpu_memory_utilization
        if gpu is not None and not 0 < gpu <= 1:
            raise LoopUsageError(f"--gpu-memory-utilization must be in (0, 1], got {gpu}")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise LoopUsageError(f"--max-model-len must be at least 2, got {self.max_model_len}")
        if not self.startup_timeout_s > 0:
            raise LoopUsageError("the server startup timeout must be positive")
        return self


def train_template(**fields: Any) -> TrainConfig:
    """A TrainConfig whose dataset, base model and output the round fills in."""
    return TrainConfig(dataset="", base_model="", output="", **fields)


@dataclass(frozen=True)
class StagesConfig:
    """What a round runs after its rollouts: collect, then transform, then train (``--then``).

    The transform and train settings are the stages' own configs, embedded: a round fills in
    what only it knows (its collection, the dataset version it wrote, the model it served).
    """

    then: str = "none"
    """Chain the stages after the rollouts, up to this one."""
    tag: str | None = None
    """Tag of the round's collection (iter-N in the Algorithm)."""
    transform: TransformConfig = field(default_factory=lambda: TransformConfig(name="rounds"))
    """How the round's dataset version is built (its collections are the round's own)."""
    train: TrainConfig = field(default_factory=train_template)
    """How the next model is trained (dataset, base model and output are the round's own)."""

    def includes(self, stage: str) -> bool:
        """Whether ``stage`` runs in this round."""
        return THEN.index(self.then) >= THEN.index(stage)

    def validate(self) -> StagesConfig:
        if self.then not in THEN:
            raise LoopUsageError(f"unknown --then {self.then!r}", f"use one of {', '.join(THEN[1:])}")
        self.transform.validate()
        replace(self.train, dataset="-", base_model="-", output="-").validate()
        return self


@dataclass(frozen=True)
class RoundConfig:
    """One serving round: how to serve, how long to wait for the runners, what to chain after."""

    server: ServerConfig = field(default_factory=ServerConfig)
    """The model server."""
    stages: StagesConfig = field(default_factory=StagesConfig)
    """The stages chained after the rollouts."""
    proxy_model_name: str | None = None
    """Model name agents see through the proxy; the served name when None."""
    proxy_port: int | None = None
    """Port of the LLM proxy tracebank starts; a free one when None (unused with the Trainer's proxy)."""
    resource_name: str = "main_llm"
    """Name of the proxy's LLM resource in the store (what the recipe publishes)."""
    mode: str = "train"
    """Rollout mode of the enqueued tasks: ``train``, ``val`` or ``test``."""
    timeout_s: float = 3600.0
    """Seconds to wait for every rollout of the round to finish."""
    poll_interval_s: float = 1.0
    """Seconds between ``wait_for_rollouts`` polls."""
    settle_s: float = 1.0
    """After the last rollout: seconds without a new span before the round's spans count as complete
    (the proxy exports a call's spans after it has answered)."""
    settle_timeout_s: float = 30.0
    """Longest wait for the spans to settle."""
    log_dir: Path | None = None
    """Folder for the model server's log; the warehouse's tmp folder (or none) when None."""

    def validate(self) -> RoundConfig:
        self.server.validate()
        self.stages.validate()
        if self.mode not in ("train", "val", "test"):
            raise LoopUsageError(f"unknown rollout mode {self.mode!r}", "use train, val or test")
        for name in ("timeout_s", "poll_interval_s", "settle_timeout_s"):
            if not getattr(self, name) > 0:
                raise LoopUsageError(f"{name.removesuffix('_s').replace('_', ' ')} must be positive")
        if self.settle_s < 0:
            raise LoopUsageError("settle time must not be negative")
        return self

    def with_stages(self, **changes: Any) -> RoundConfig:
        """A copy with some StagesConfig fields changed."""
        return replace(self, stages=replace(self.stages, **changes))


@dataclass(frozen=True)
class AlgorithmConfig:
    """The warehouse-backed SFT Algorithm: iterations of serve, roll out, collect, transform, train."""

    iterations: int = 2
    """Serving rounds; each trains the model the next one serves (the recipe's ``max_iterations``)."""
    models_dir: Path | None = None
    """Where ``version_<N>`` models are written; the initial model's parent folder when None."""
    round: RoundConfig = field(default_factory=lambda: RoundConfig(stages=StagesConfig(then="train")))
    """Settings of each round; ``stages.then`` is always ``train`` here and ``stages.tag`` becomes
    ``iter-N``."""

    def validate(self) -> AlgorithmConfig:
        if self.iterations < 1:
            raise LoopUsageError(f"iterations must be at least 1, got {self.iterations}")
        self.round.validate()
        return self


#: Training settings of the demo's tiny model.
DEMO_TRAIN_OPTIONS: dict[str, Any] = {
    "learning_rate": 2e-3,
    "warmup_steps": 0,
    "batch_size": 2,
    "grad_accum": 1,
    "lora_r": 8,
    "lora_alpha": 16,
}


@dataclass(frozen=True)
class DemoConfig:
    """``tracebank demo``: everything local, sized to finish in minutes on two CPU cores."""

    work_dir: Path = Path("demo-models")
    """Folder of the demo's models (``version_0`` is built there) and logs."""
    rollouts: int = field(default=32, metadata={"range": {"min": 1}})
    """Toy tasks rolled out (one rollout each)."""
    runners: int = field(default=2, metadata={"range": {"min": 1}})
    """agentlightning runner processes."""
    iterations: int = field(default=1, metadata={"range": {"min": 1}})
    """Algorithm iterations (each one serves, rolls out, collects, transforms and trains)."""
    seed: int = 0
    """Seed of the toy tasks and the tiny model."""
    transform: TransformConfig = field(default_factory=lambda: TransformConfig(name="demo", top_fraction=0.5))
    """How each iteration's dataset version is built (the recipe's top half by reward)."""
    train: TrainConfig = field(default_factory=lambda: train_template(max_steps=16, **DEMO_TRAIN_OPTIONS))
    """How each iteration trains; a tiny model learns nothing at the recipe's 2e-4 in a few steps."""
    timeout_s: float = 240.0
    """Seconds each iteration's rollouts may take."""
    server: str = "cpu"
    """tracebank's quick CPU server, or the real vLLM (its CPU build here; the tiny model is then a Qwen3)."""

    def validate(self) -> DemoConfig:
        if self.rollouts < 1 or self.runners < 1 or self.iterations < 1:
            raise LoopUsageError("rollouts, runners and iterations must be at least 1")
        StagesConfig(transform=self.transform, train=self.train).validate()
        if self.server not in SERVERS:
            raise LoopUsageError(f"unknown server {self.server!r}", f"use one of {', '.join(SERVERS)}")
        return self
