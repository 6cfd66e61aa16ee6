"""The train stage's configuration: every hyperparameter of a run, with the anchor's defaults.

The defaults are those of Agent Lightning's Unsloth SFT recipe (LoRA r=32, alpha=32, no
dropout, the seven Qwen projections, lr 2e-4, batch 2 x 4 accumulation, 5 warmup steps,
linear schedule, seed 3407, 4-bit load and 8-bit AdamW on CUDA). Options left as ``None``
are decided per machine by :meth:`TrainConfig.resolve` and the decision is recorded.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any

from tracebank.train.errors import TrainConfigError

QWEN_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
BACKENDS = ("auto", "unsloth", "trl")
SAVE_METHODS = ("merged_16bit", "lora")
EVAL_STRATEGIES = ("epoch", "steps", "no")
SCHEDULERS = (
    "linear",
    "cosine",
    "constant",
    "constant_with_warmup",
    "cosine_with_restarts",
    "polynomial",
    "inverse_sqrt",
)
METHODS = ("sft", "dpo")
FINETUNE = ("lora", "full")
#: The DPO losses TRL's DPOTrainer offers (one pair-wise loss a run).
DPO_LOSSES = (
    "sigmoid",
    "hinge",
    "ipo",
    "exo_pair",
    "nca_pair",
    "robust",
    "bco_pair",
    "sppo_hard",
    "aot",
    "aot_unpaired",
    "apo_zero",
    "apo_down",
    "discopop",
    "sigmoid_norm",
)
OPTIMIZERS = ("adamw_8bit", "adamw_torch", "adamw_torch_fused", "paged_adamw_8bit", "sgd", "adafactor")


#: Token positions and ids are int32 in the dataset and in torch's position ids.
MAX_TOKENS = 2**31 - 1


#: A hostname's label (RFC 1123): letters, digits and inner hyphens, at most 63 of them.
_HOST_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_RDZV_HINT = "HOST:PORT of node 0 on a trusted network, e.g. node0.cluster:29400 or [fd00::1]:29400"


def check_rdzv_endpoint(endpoint: str) -> None:
    """Refuse in one line an ``--rdzv-endpoint`` that is not HOST:PORT with HOST an IPv4 address, an
    IPv6 address in brackets or a hostname of valid syntax, and PORT in 1-65535 (torchrun would
    otherwise fail later, or wait, with no word on why)."""
    host, colon, port = endpoint.rpartition(":")
    if not colon or not host:
        problem = "is not HOST:PORT"
    elif not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        problem = "has no port in 1-65535"
    elif ":" in host and not host.startswith("["):
        problem = "needs brackets around an IPv6 address ([ADDRESS]:PORT)"
    elif not _is_host(host):
        problem = f"{host!r} is not a valid host (an IP address, [IPv6] or hostname)"
    else:
        return
    raise TrainConfigError(f"--rdzv-endpoint {endpoint!r} {problem}", _RDZV_HINT)


def _is_host(host: str) -> bool:
    if host.startswith("[") and host.endswith("]"):
        return _is_ip(host[1:-1], ipaddress.IPv6Address)
    if _is_ip(host, ipaddress.IPv4Address):
        return True
    labels = host.removesuffix(".").split(".")
    # An all-digit last label would read as a (bad) IPv4 address, not as a name.
    return (
        len(host) <= 253
        and all(_HOST_LABEL.fullmatch(label) for label in labels)
        and not labels[-1].isdigit()
    )


def _is_ip(text: str, kind: type[ipaddress.IPv4Address | ipaddress.IPv6Address]) -> bool:
    try:
        kind(text)
    except ValueError:
        return False
    return True


@dataclass
class Environment:
    """What the training machine offers; the child process fills it in, tests build it by hand."""

    cuda: bool = False
    #: bf16 arithmetic is supported by the accelerator.
    bf16_supported: bool = False
    #: bitsandbytes imports (4-bit loading, 8-bit optimizers).
    bitsandbytes: bool = False
    #: unsloth is installed.
    unsloth: bool = False
    #: Apple's MPS backend is available.
    mps: bool = False

    @property
    def device(self) -> str:
        return "cuda" if self.cuda else "mps" if self.mps else "cpu"


@dataclass
class Resolved:
    """The machine-dependent choices a run actually used (all recorded in run.json)."""

    backend: str
    device: str
    load_in_4bit: bool
    optim: str
    bf16: bool
    gradient_checkpointing: bool
    #: dtype the merged model is written in.
    save_dtype: str


@dataclass
class TrainConfig:
    """One training run: what to train on, from what, to where, and how."""

    dataset: str
    """Dataset version to train on: ``NAME`` (latest version) or ``NAME@vN``."""
    base_model: str
    """Local folder of the base model, or a hub id ORG/NAME[@REVISION] already in the Hugging Face cache."""
    output: str
    """Folder the trained model is written to; must not exist yet (or be empty) unless ``overwrite``."""
    backend: str = "auto"
    """``auto`` (Unsloth when CUDA is there and unsloth imports, else TRL+PEFT), ``unsloth`` or ``trl``."""
    save: str = "merged_16bit"
    """``merged_16bit``: LoRA merged into full weights (what vLLM serves); ``lora``: the adapter only."""
    overwrite: bool = False
    """Replace an existing, non-empty output folder."""
    lora_r: int = 32
    """LoRA rank."""
    lora_alpha: int = 32
    """LoRA scaling numerator (the update is scaled by alpha / r)."""
    lora_dropout: float = 0.0
    """Dropout on the LoRA branch."""
    target_modules: tuple[str, ...] = QWEN_TARGETS
    """Module names LoRA attaches to (suffix match, as PEFT does); every one must exist in the model."""
    learning_rate: float = 2e-4
    """Peak learning rate."""
    batch_size: int = 2
    """Rows per device per forward pass (training and evaluation)."""
    grad_accum: int = 4
    """Forward passes summed before one optimizer step (effective batch = batch_size * grad_accum)."""
    warmup_steps: int = 5
    """Optimizer steps of linear warmup."""
    lr_scheduler: str = "linear"
    """Learning-rate schedule after warmup (a transformers scheduler name)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm."""
    seed: int = 3407
    """Seed for adapter init, data order and dropout: same seed, same version, same machine -> same losses."""
    epochs: float = 1.0
    """Passes over the training split (ignored when --max-steps is set)."""
    max_steps: int | None = None
    """Stop after this many optimizer steps (overrides --epochs)."""
    max_length: int | None = None
    """Longest row in tokens (default: the dataset's longest row; never TRL's silent 1,024)."""
    truncate: bool = False
    """Cut rows longer than --max-length (keeping the start) instead of refusing the dataset."""
    load_in_4bit: bool | None = None
    """Load the base model in 4-bit (QLoRA) (default: on CUDA when bitsandbytes or unsloth is there)."""
    optim: str | None = None
    """Optimizer name (default: adamw_8bit on CUDA when bitsandbytes is there, else adamw_torch)."""
    bf16: bool | None = None
    """Train in bf16 (default: when the accelerator supports it; never on CPU)."""
    gradient_checkpointing: bool | None = None
    """Recompute activations to save memory (default: on CUDA only)."""
    eval_strategy: str = "epoch"
    """With a validation split: evaluate every epoch, every --eval-steps (steps) or no."""
    eval_steps: int | None = None
    """Optimizer steps between evaluations when --eval-strategy is steps."""
    early_stopping_patience: int = 0
    """Stop after this many evaluations without a better eval loss (0 = never)."""
    logging_steps: int = 1
    """Optimizer steps between train-loss records in metrics.jsonl."""
    report_to: tuple[str, ...] = ()
    """Also send metrics to these trackers (TRL's report_to: tensorboard, wandb, trackio, ...)."""
    timeout: float | None = None
    """Seconds the training process may run before it is stopped and the run recorded failed."""
    method: str = "sft"
    """sft: imitate a dataset's rows; dpo: prefer chosen over rejected on a --kind preference version."""
    beta: float = 0.1
    """DPO's beta: how far the policy may move from the reference (the base without the adapter)."""
    dpo_loss: str = "sigmoid"
    """DPO loss as TRL's DPOTrainer names it (sigmoid, ipo, hinge, ...)."""
    save_steps: int | None = None
    """Write a resumable checkpoint (weights, optimizer, scheduler, RNG, data position) every N steps."""
    save_total_limit: int = 2
    """Resumable checkpoints kept in the run's scratch folder (older ones are removed)."""
    packing: bool = False
    """Pack rows padding-free into one sequence per batch, position ids restarting per row."""
    attn_implementation: str | None = None
    """Attention kernel: sdpa, eager, flash_attention_2, ... (default: what transformers picks)."""
    finetune: str = "lora"
    """lora: a LoRA adapter on the frozen base (the recipe); full: every weight (TRL, saved whole)."""
    fsdp: bool = False
    """Shard a --finetune full run's weights, gradients and optimizer state over its ranks with FSDP
    (accelerate's full_shard auto_wrap; CUDA GPUs of one node; without it ranks run DDP)."""
    nproc_per_node: int = 1
    """Training processes on this machine (one per GPU): >1 runs data-parallel (on one node the ranks
    meet in a private file and listen on loopback only; over nodes, torchrun's rendezvous)."""
    nnodes: int = 1
    """Machines taking part in a data-parallel run (each runs the same command)."""
    node_rank: int = 0
    """This machine's rank among --nnodes (0 records the run and writes the model)."""
    rdzv_endpoint: str | None = None
    """HOST:PORT of node 0's c10d rendezvous every node joins (needed with --nnodes > 1; IPv6 in
    brackets). Its network must be trusted: whoever reaches it can join the run, and torchrun
    unpickles what the (unauthenticated) store there holds."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Further SFTConfig / TrainingArguments keys passed through as is (recorded too)."""

    def validate(self) -> TrainConfig:
        """Reject impossible values and combinations before anything is started."""

        def bad(message: str, hint: str | None = None) -> TrainConfigError:
            return TrainConfigError(message, hint)

        if not self.dataset:
            raise bad("no dataset given", "pass --dataset NAME[@vN]")
        if not self.base_model:
            raise bad("no base model given", "pass --base-model PATH or ORG/NAME[@REVISION]")
        if not self.output:
            raise bad("no output folder given", "pass --output DIR")
        if self.backend not in BACKENDS:
            raise bad(f"unknown backend {self.backend!r}", f"use one of {', '.join(BACKENDS)}")
        if self.save not in SAVE_METHODS:
            raise bad(f"unknown save method {self.save!r}", f"use one of {', '.join(SAVE_METHODS)}")
        if not self.learning_rate > 0:
            raise bad(f"learning rate must be positive, got {self.learning_rate}")
        if self.lora_r < 1:
            raise bad(f"LoRA rank must be at least 1, got {self.lora_r}")
        if self.lora_alpha <= 0:
            raise bad(f"LoRA alpha must be positive, got {self.lora_alpha}")
        if not 0 <= self.lora_dropout < 1:
            raise bad(f"LoRA dropout must be in [0, 1), got {self.lora_dropout}")
        if not self.target_modules:
            raise bad("no LoRA target modules given")
        for name, value in (
            ("batch size", self.batch_size),
            ("gradient accumulation", self.grad_accum),
            ("logging steps", self.logging_steps),
        ):
            if value < 1:
                raise bad(f"{name} must be at least 1, got {value}")
        if self.warmup_steps < 0:
            raise bad(f"warmup steps must be >= 0, got {self.warmup_steps}")
        if self.weight_decay < 0 or self.max_grad_norm <= 0:
            raise bad("weight decay must be >= 0 and max grad norm > 0")
        if self.lr_scheduler not in SCHEDULERS:
            raise bad(f"unknown lr scheduler {self.lr_scheduler!r}", f"use one of {', '.join(SCHEDULERS)}")
        if self.optim is not None and self.optim not in OPTIMIZERS:
            raise bad(f"unknown optimizer {self.optim!r}", f"use one of {', '.join(OPTIMIZERS)}")
        if self.max_steps is None and not self.epochs > 0:
            raise bad(f"epochs must be positive, got {self.epochs}", "or pass --max-steps")
        if self.max_steps is not None and self.max_steps < 1:
            raise bad(f"max steps must be at least 1, got {self.max_steps}")
        if self.max_length is not None and self.max_length < 2:
            raise bad(f"max length must be at least 2 tokens, got {self.max_length}")
        if self.max_length is not None and self.max_length > MAX_TOKENS:
            raise bad(
                f"max length {self.max_length} is beyond any model's context (at most {MAX_TOKENS:,} tokens)"
            )
        if self.truncate and self.max_length is None:
            raise bad("--truncate needs --max-length", "the dataset's own longest row is never too long")
        if self.eval_strategy not in EVAL_STRATEGIES:
            raise bad(
                f"unknown eval strategy {self.eval_strategy!r}", f"use one of {', '.join(EVAL_STRATEGIES)}"
            )
        if self.eval_strategy == "steps" and not (self.eval_steps and self.eval_steps > 0):
            raise bad("eval strategy 'steps' needs --eval-steps N (N >= 1)")
        if self.early_stopping_patience < 0:
            raise bad("early stopping patience must be >= 0")
        if self.early_stopping_patience and self.eval_strategy == "no":
            raise bad("early stopping needs evaluation", "drop --eval-strategy no or the patience")
        if "none" in self.report_to or any(not name.strip() for name in self.report_to):
            raise bad(
                "--report-to takes tracker names", "leave it out to record only the warehouse's run_metrics"
            )
        if self.timeout is not None and not self.timeout > 0:
            raise bad(f"timeout must be positive seconds, got {self.timeout}")
        if self.save_steps is not None and self.save_steps < 1:
            raise bad(f"save steps must be at least 1, got {self.save_steps}")
        if self.save_total_limit < 1:
            raise bad(f"save total limit must be at least 1, got {self.save_total_limit}")
        self._validate_method()
        self._validate_distributed()
        self._validate_finetune()
        return self

    def _validate_finetune(self) -> None:
        if self.finetune not in FINETUNE:
            raise TrainConfigError(
                f"unknown --finetune {self.finetune!r}", f"use one of {', '.join(FINETUNE)}"
            )
        if self.fsdp and self.finetune != "full":
            raise TrainConfigError(
                "--fsdp shards full-parameter training; LoRA runs are data-parallel with DDP",
                "add --finetune full, or drop --fsdp",
            )
        if self.fsdp and self.nnodes > 1:
            raise TrainConfigError("--fsdp trains on one node for now", "drop --nnodes, or drop --fsdp (DDP)")
        if self.finetune == "lora":
            return
        refusals = [
            (self.backend == "unsloth", "--finetune full trains with TRL", "use --backend trl (or auto)"),
            (self.save == "lora", "--finetune full has no adapter to save", "use --save merged_16bit"),
            (bool(self.load_in_4bit), "4-bit weights cannot be trained in full", "drop --load-in-4bit"),
            (
                self.method == "dpo",
                "DPO trains a LoRA adapter (its reference is the base without it)",
                "drop --finetune full",
            ),
        ]
        for refused, message, hint in refusals:
            if refused:
                raise TrainConfigError(message, hint)

    def _validate_method(self) -> None:
        if self.method not in METHODS:
            raise TrainConfigError(f"unknown method {self.method!r}", f"use one of {', '.join(METHODS)}")
        if self.dpo_loss not in DPO_LOSSES:
            raise TrainConfigError(
                f"unknown DPO loss {self.dpo_loss!r}", f"use one of {', '.join(DPO_LOSSES)}"
            )
        if not self.beta > 0:
            raise TrainConfigError(f"--beta must be positive, got {self.beta}")

    @property
    def world_size(self) -> int:
        """Training processes over all machines."""
        return self.nproc_per_node * self.nnodes

    def _validate_distributed(self) -> None:
        if self.nproc_per_node < 1 or self.nnodes < 1:
            raise TrainConfigError("--nproc-per-node and --nnodes must be at least 1")
        if not 0 <= self.node_rank < self.nnodes:
            raise TrainConfigError(f"--node-rank must be in [0, {self.nnodes}), got {self.node_rank}")
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise TrainConfigError(
                "--nnodes > 1 needs --rdzv-endpoint HOST:PORT", "the same address on every node"
            )
        if self.rdzv_endpoint is not None:
            check_rdzv_endpoint(self.rdzv_endpoint)
        if self.nnodes > 1 and self.save_steps:
            raise TrainConfigError(
                "--save-steps (resume) is not supported for multi-node runs yet",
                "leave --save-steps out, or train on one node",
            )
        if self.world_size > 1 and self.backend == "unsloth":
            raise TrainConfigError(
                "the unsloth backend trains on one GPU only",
                "use --backend trl (or auto) with --nproc-per-node/--nnodes",
            )

    def resolve(self, env: Environment) -> Resolved:
        """Decide the machine-dependent options for ``env``; raise for combinations it cannot run."""
        backend = self.backend
        if backend == "auto":
            single = self.world_size == 1 and self.finetune == "lora"
            backend = "unsloth" if env.cuda and env.unsloth and single else "trl"
        if self.fsdp and not env.cuda:
            raise TrainConfigError(
                "--fsdp needs CUDA GPUs: accelerate shards only there (CPU ranks would train with DDP)",
                "drop --fsdp on this machine",
            )
        if backend == "unsloth":
            if not env.cuda:
                raise TrainConfigError(
                    "the unsloth backend needs a CUDA GPU and none is visible",
                    "use --backend trl (or auto) on this machine",
                )
            if not env.unsloth:
                raise TrainConfigError(
                    "the unsloth backend was asked for but unsloth is not installed",
                    "pip install 'tracebank[gpu]', or use --backend trl",
                )
        # Unsloth's 4-bit loading is bitsandbytes too: without it, it loads 16-bit weights.
        quantizer = env.bitsandbytes
        load_in_4bit = self.load_in_4bit
        if load_in_4bit is None:
            load_in_4bit = env.cuda and quantizer and self.finetune == "lora"
        elif load_in_4bit and not env.cuda:
            raise TrainConfigError("4-bit loading needs a CUDA GPU", "drop --load-in-4bit on this machine")
        elif load_in_4bit and not quantizer:
            raise TrainConfigError(
                "4-bit loading needs bitsandbytes, which is not installed",
                "pip install bitsandbytes, or pass --no-load-in-4bit",
            )
        optim = self.optim
        if optim is None:
            optim = "adamw_8bit" if env.cuda and env.bitsandbytes else "adamw_torch"
        elif "8bit" in optim and not (env.cuda and env.bitsandbytes):
            raise TrainConfigError(
                f"optimizer {optim} needs CUDA and bitsandbytes", "use --optim adamw_torch on this machine"
            )
        bf16 = self.bf16
        if bf16 is None:
            bf16 = env.cuda and env.bf16_supported
        elif bf16 and env.cuda and not env.bf16_supported:
            raise TrainConfigError("this GPU does not support bf16", "drop --bf16")
        gradient_checkpointing = (
            env.cuda if self.gradient_checkpointing is None else self.gradient_checkpointing
        )
        if env.cuda:
            save_dtype = "bfloat16" if env.bf16_supported else "float16"
        else:
            # Without a GPU the model trains in float32; casting to 16 bits here would only lose
            # precision the CPU never had to give up. vLLM casts at load time anyway.
            save_dtype = "bfloat16" if bf16 else "float32"
        return Resolved(
            backend=backend,
            device=env.device,
            load_in_4bit=bool(load_in_4bit),
            optim=optim,
            bf16=bool(bf16),
            gradient_checkpointing=bool(gradient_checkpointing),
            save_dtype=save_dtype,
        )

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["target_modules"] = list(self.target_modules)
        data["report_to"] = list(self.report_to)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise TrainConfigError(f"unknown training option(s): {', '.join(unknown)}")
        values = dict(data)
        for name in ("target_modules", "report_to"):
            if name in values:
                values[name] = tuple(values[name])
        return cls(**values)
