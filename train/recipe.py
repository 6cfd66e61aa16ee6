"""The training recipe both backends share: setup, train, save, cleanup.

It runs inside the training child process. Only model loading, adapter attachment and
saving come from the backend; data, collation, SFTConfig, callbacks, evaluation with the
best checkpoint and early stopping are this one path, so the two backends cannot drift.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from tracebank.core.errors import first_line
from tracebank.core.events import (
    CheckpointSaved,
    Event,
    Metric,
    MetricLogged,
    ModelLoaded,
    ModelSaved,
    TrainBegin,
)
from tracebank.train import checkpoints, preflight
from tracebank.train.collate import PackCollator, PadCollator
from tracebank.train.config import Environment, Resolved, TrainConfig
from tracebank.train.dataset import load_split
from tracebank.train.errors import TrainConfigError, TrainError
from tracebank.train.spec import ChildSpec

#: How a recipe reports to the parent: one typed event at a time.
Emit = Callable[[Event], None]


def detect_environment(want_unsloth: bool) -> tuple[Environment, str | None]:
    """What this machine offers. Unsloth is imported here (before trl) when it may be used."""
    import torch

    cuda = torch.cuda.is_available()
    mps_backend = getattr(torch.backends, "mps", None)
    env = Environment(
        cuda=cuda,
        bf16_supported=bool(cuda and torch.cuda.is_bf16_supported()),
        bitsandbytes=find_spec("bitsandbytes") is not None,
        mps=bool(mps_backend is not None and mps_backend.is_available()),
    )
    note = None
    if want_unsloth and cuda and find_spec("unsloth") is not None:
        try:
            import unsloth  # noqa: F401  (patches trl/transformers; must come first)

            env.unsloth = True
        except Exception as exc:  # an installed but broken unsloth: auto falls back to TRL
            note = f"unsloth failed to import ({type(exc).__name__}: {exc}); using TRL+PEFT"
    return env, note


def metric_callback(emit: Emit) -> Any:
    from transformers import TrainerCallback

    class MetricsToRecord(TrainerCallback):
        """Sends every train log and evaluation to the parent, which appends them to metrics.jsonl."""

        def __init__(self) -> None:
            self.started = time.perf_counter()
            self.tokens: int | None = None

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.started = time.perf_counter()
            emit(
                TrainBegin(
                    max_steps=state.max_steps, epochs=args.num_train_epochs if args.max_steps <= 0 else None
                )
            )

        def on_log(
            self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
        ) -> None:
            logs = logs or {}
            elapsed = round(time.perf_counter() - self.started, 4)
            if "num_tokens" in logs:
                self.tokens = int(logs["num_tokens"])
            if "loss" in logs:
                metric = Metric(
                    step=state.global_step,
                    split="train",
                    loss=logs["loss"],
                    epoch=logs.get("epoch"),
                    learning_rate=logs.get("learning_rate"),
                    grad_norm=logs.get("grad_norm"),
                    tokens=self.tokens,
                    time=elapsed,
                    token_accuracy=logs.get("mean_token_accuracy"),
                    **dpo_metrics(logs, ""),
                )
                emit(MetricLogged(metric))
            if "eval_loss" in logs:
                metric = Metric(
                    step=state.global_step,
                    split="eval",
                    loss=logs["eval_loss"],
                    epoch=logs.get("epoch"),
                    tokens=self.tokens,
                    time=elapsed,
                    token_accuracy=logs.get("eval_mean_token_accuracy"),
                    **dpo_metrics(logs, "eval_"),
                )
                emit(MetricLogged(metric))

    return MetricsToRecord()


#: TRL's DPO log keys -> the Metric fields that record them.
DPO_LOGS = {
    "rewards/chosen": "rewards_chosen",
    "rewards/rejected": "rewards_rejected",
    "rewards/margins": "rewards_margin",
    "rewards/accuracies": "rewards_accuracy",
}


def dpo_metrics(logs: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The DPO metrics in a TRL log (with ``prefix``: ``eval_`` for evaluations); empty for SFT."""
    return {field: logs[prefix + key] for key, field in DPO_LOGS.items() if prefix + key in logs}


def _checkpoint_callback(emit: Emit) -> Any:
    from transformers import TrainerCallback

    class MarkCheckpoints(TrainerCallback):
        """Marks each finished checkpoint whole (resume trusts only those) and tells the parent."""

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            folder = Path(args.output_dir) / f"{checkpoints.PREFIX}{state.global_step}"
            if state.is_world_process_zero and folder.is_dir():
                checkpoints.mark_complete(folder)
                emit(CheckpointSaved(step=state.global_step))

    return MarkCheckpoints()


def _save_arguments(config: TrainConfig, strategy: str) -> dict[str, Any]:
    """How the trainer saves: resumable checkpoints every --save-steps, else only what picking
    the best evaluation needs (weights alone, at each evaluation)."""
    if config.save_steps:
        return {
            "save_strategy": "steps",
            "save_steps": config.save_steps,
            "save_total_limit": config.save_total_limit,
            "save_only_model": False,
        }
    return {
        "save_strategy": strategy,
        "save_steps": config.eval_steps if strategy == "steps" and config.eval_steps else 500,
        "save_total_limit": 2 if strategy != "no" else None,
        "save_only_model": True,
    }


def fused_loss_available(device: str) -> bool:
    """TRL 1.15 computes the SFT loss with Triton kernels; they exist only with Triton, on a GPU."""
    if device != "cuda":
        return False
    try:
        from trl.trainer import utils as trl_utils
    except ImportError:
        return False
    return getattr(trl_utils, "_ChunkedLogProbFunction", None) is not None


def _trainer_class(fused: bool) -> Any:
    """TRL's SFTTrainer (Unsloth's patched one when unsloth was imported first).

    Where TRL's Triton loss cannot run (CPU, MPS, no Triton), the loss is the model's own
    causal-LM cross-entropy (`transformers.Trainer.compute_loss`): the same mean over the
    tokens whose label is not -100, so the prompt never contributes.
    """
    import torch
    from transformers import Trainer
    from trl import SFTTrainer

    if fused:
        return SFTTrainer

    class PlainLossSFTTrainer(SFTTrainer):  # type: ignore[misc, valid-type]
        def compute_loss(
            self,
            model: Any,
            inputs: dict[str, Any],
            return_outputs: bool = False,
            num_items_in_batch: Any = None,
        ) -> Any:
            if model.training:
                ids, mask = inputs["input_ids"], inputs.get("attention_mask")
                # A packed batch has no mask: every token is real. Summed over the data-parallel ranks.
                local = (
                    mask.sum() if mask is not None else torch.tensor(ids.numel(), device=ids.device)
                ).reshape(1)
                self._total_train_tokens += int(self.accelerator.gather(local).sum().item())
                self._metrics["train"]["num_tokens"] = [self._total_train_tokens]
            return Trainer.compute_loss(
                self, model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch
            )

    return PlainLossSFTTrainer


def training_arguments(
    config: TrainConfig, resolved: Resolved, spec: ChildSpec, strategy: str
) -> dict[str, Any]:
    """The TrainingArguments both methods share (SFTConfig and DPOConfig add their own)."""
    scratch = Path(spec.scratch_dir)
    ranks = Ranks.from_env()
    return dict(
        output_dir=str(checkpoints.checkpoints_dir(scratch)),
        per_device_train_batch_size=config.batch_size,
        per_device_eval_batch_size=config.batch_size,
        gradient_accumulation_steps=config.grad_accum,
        learning_rate=config.learning_rate,
        lr_scheduler_type=config.lr_scheduler,
        warmup_steps=config.warmup_steps,
        weight_decay=config.weight_decay,
        max_grad_norm=config.max_grad_norm,
        num_train_epochs=config.epochs,
        max_steps=config.max_steps or -1,
        seed=config.seed,
        data_seed=config.seed,
        optim=resolved.optim,
        bf16=resolved.bf16,
        fp16=False,
        logging_strategy="steps",
        logging_steps=config.logging_steps,
        # run_metrics is written by tracebank's own callback whatever else reports.
        report_to=list(config.report_to) or "none",
        disable_tqdm=True,
        remove_unused_columns=False,
        eval_strategy=strategy,
        eval_steps=config.eval_steps if strategy == "steps" else None,
        load_best_model_at_end=strategy != "no",
        metric_for_best_model="eval_loss" if strategy != "no" else None,
        greater_is_better=False if strategy != "no" else None,
        **_save_arguments(config, strategy),
        dataloader_pin_memory=resolved.device == "cuda",
        **parallel_arguments(config, resolved, ranks.world_size),
        **config.extra,
    )


def parallel_arguments(config: TrainConfig, resolved: Resolved, world_size: int) -> dict[str, Any]:
    """How the ranks share the model: each holds all of it (DDP), or --fsdp shards it (FSDP2 through
    accelerate, each decoder layer a unit, the whole model gathered to rank 0 when saved)."""
    if config.fsdp:
        return {
            "fsdp": "full_shard auto_wrap",
            # FSDP's own activation checkpointing: gradient_checkpointing would all-gather twice.
            "fsdp_config": {
                "version": 2,
                "state_dict_type": "FULL_STATE_DICT",
                "activation_checkpointing": resolved.gradient_checkpointing,
            },
            "gradient_checkpointing": False,
        }
    return {
        "gradient_checkpointing": resolved.gradient_checkpointing,
        # Every trained weight is used in each step; DDP need not search for unused ones.
        "ddp_find_unused_parameters": False if world_size > 1 else None,
        # Without it accelerate does not see the CPU ranks as one gloo group and each trains alone.
        "use_cpu": resolved.device == "cpu" and world_size > 1,
    }


@dataclass(frozen=True)
class Ranks:
    """This process's place in a data-parallel run (torchrun's variables; one process: 0 of 1)."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

    @classmethod
    def from_env(cls) -> Ranks:
        env = os.environ
        return cls(int(env.get("RANK", 0)), int(env.get("LOCAL_RANK", 0)), int(env.get("WORLD_SIZE", 1)))


def check_same_dataset(args: Any, content_hash: str | None) -> None:
    """Every rank must train on the same dataset version: compare content hashes before step 1."""
    import torch.distributed as dist

    _ = args.device  # starts the process group (gloo on CPU, nccl on CUDA) and picks this rank's device
    hashes: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(hashes, content_hash)
    odd = [rank for rank, h in enumerate(hashes) if h != hashes[0]]
    if odd:
        raise TrainError(
            f"rank {odd[0]} holds dataset content hash {hashes[odd[0]]}, rank 0 holds {hashes[0]}",
            "every node must read the same dataset version",
        )


class SFTRecipe:
    """Supervised fine-tuning of a LoRA adapter on one dataset version's pre-tokenized rows."""

    def __init__(self, spec: ChildSpec, emit: Emit) -> None:
        self.spec = spec
        self.config = spec.config
        self.emit = emit
        self.trainer: Any = None
        self.tokenizer: Any = None
        self.resolved: Resolved | None = None
        self.backend: Any = None
        self.stats: dict[str, Any] = {}
        self.ranks = Ranks.from_env()
        #: writes the model: local rank 0 of node 0 (under c10d that need not be global rank 0)
        self.leader = self.ranks.local_rank == 0 and self.config.node_rank == 0

    def load_model(self) -> Any:
        """The base model with its LoRA adapter attached, on this machine's backend (both methods)."""
        config, spec = self.config, self.spec
        distributed = config.world_size > 1
        env, note = detect_environment(want_unsloth=config.backend in ("auto", "unsloth") and not distributed)
        resolved = self.resolved = config.resolve(env)
        if distributed and config.backend == "auto":
            note = f"auto chose TRL+PEFT: Unsloth trains on one GPU, this run has {config.world_size} ranks"
        from tracebank.train.backends import get_backend

        self.backend = get_backend(resolved.backend)
        from transformers import set_seed

        set_seed(config.seed)
        try:
            model, self.tokenizer = self.backend.load(spec, resolved)
        except (OSError, ValueError, RuntimeError) as exc:
            raise TrainError(f"cannot load base model {spec.base_model}: {_first_line(exc)}") from exc
        if config.finetune == "lora":
            names = [name for name, _ in model.named_modules()]
            preflight.check_targets(config.target_modules, names, spec.base_model)
        vocab = model.get_input_embeddings().weight.shape[0]
        if spec.max_token_id >= vocab:
            raise TrainError(
                f"dataset holds token id {spec.max_token_id}, outside the model's embedding of {vocab} rows",
                "the dataset was built with another tokenizer",
            )
        loaded_4bit = is_loaded_in_4bit(model)
        if loaded_4bit != resolved.load_in_4bit:
            # Record what was done, not what was asked (a backend may fall back to 16 bits).
            resolved = self.resolved = dataclasses.replace(resolved, load_in_4bit=loaded_4bit)
            done = f"base model loaded in {'4' if loaded_4bit else '16'} bits"
            note = f"{note}; {done}" if note else done
        if config.finetune == "lora":
            model = self._attach_adapter(model)
        trainable, total = parameter_counts(model)
        self.emit(
            ModelLoaded(
                backend=resolved.backend,
                resolved=dataclasses.asdict(resolved),
                trainable_params=int(trainable),
                total_params=int(total),
                trainable_percent=round(100 * trainable / max(total, 1), 4),
                note=note,
                pad_token_id=self.tokenizer.pad_token_id,
            )
        )
        return model

    def _attach_adapter(self, model: Any) -> Any:
        assert self.resolved is not None
        try:
            return self.backend.attach_adapter(model, self.spec, self.resolved)
        except Exception as exc:  # peft and unsloth raise many types; the run needs one line
            raise TrainError(
                f"cannot attach LoRA adapters to {self.spec.base_model}: {_first_line(exc)}",
                "check --target-modules against the model's layer names",
            ) from exc

    def setup(self) -> None:
        model = self.load_model()
        config, spec, resolved = self.config, self.spec, self.resolved
        assert resolved is not None
        scratch = Path(spec.scratch_dir)
        splits, keep = spec.splits, spec.keep_rows
        cache = scratch / "hf-cache" / f"rank-{self.ranks.local_rank}"  # ranks never share a file
        train = load_split([Path(p) for p in splits["train"]], cache, keep.get("train"))
        has_eval = "validation" in splits and config.eval_strategy != "no"
        evaluation = (
            load_split([Path(p) for p in splits["validation"]], cache, keep.get("validation"))
            if has_eval
            else None
        )
        cut = spec.max_length if spec.truncate else None
        if config.packing:
            prepare_packing(model)
        collator: Any = (
            PackCollator(max_length=cut)
            if config.packing
            else PadCollator(pad_id=self.tokenizer.pad_token_id, max_length=cut)
        )
        from trl import SFTConfig

        strategy = config.eval_strategy if has_eval else "no"
        if spec.logging_dir:  # transformers' TensorBoard callback reads its folder from here
            os.environ.setdefault("TENSORBOARD_LOGGING_DIR", spec.logging_dir)
        args = SFTConfig(
            **training_arguments(config, resolved, spec, strategy),
            # TRL's default is 1,024 tokens; the dataset's own longest row (or --max-length) instead.
            max_length=spec.max_length,
            packing=False,
            # Rows are already token ids with their loss mask; TRL must neither re-tokenize nor
            # rebuild labels, and the collator needs attention_mask, so no column is dropped.
            dataset_kwargs={"skip_prepare_dataset": True},
        )
        if self.ranks.world_size > 1:
            check_same_dataset(args, spec.content_hash)
        callbacks = self.callbacks(strategy)
        # Unsloth brings its own fused cross-entropy in the model's forward; TRL's Triton head is
        # used only on the plain TRL path.
        trainer_class = _trainer_class(resolved.backend == "trl" and fused_loss_available(resolved.device))
        self.trainer = trainer_class(
            model=model,
            args=args,
            train_dataset=train,
            eval_dataset=evaluation,
            processing_class=self.tokenizer,
            data_collator=collator,
            callbacks=callbacks,
        )

    def callbacks(self, strategy: str) -> list[Any]:
        """Metrics to the run record, checkpoints marked whole (resume), early stopping (both methods)."""
        from transformers import EarlyStoppingCallback

        config = self.config
        callbacks = [metric_callback(self.emit)]
        if config.save_steps:
            callbacks.append(_checkpoint_callback(self.emit))
        if config.early_stopping_patience and strategy != "no":
            callbacks.append(EarlyStoppingCallback(early_stopping_patience=config.early_stopping_patience))
        return callbacks

    def train(self) -> dict[str, Any]:
        started = time.perf_counter()
        output = self.trainer.train(resume_from_checkpoint=self.spec.resume_from)
        state = self.trainer.state
        runtime = float(output.metrics.get("train_runtime", time.perf_counter() - started))
        tokens = next((int(h["num_tokens"]) for h in reversed(state.log_history) if "num_tokens" in h), None)
        self.stats = {
            "steps": int(state.global_step),
            "epochs": float(state.epoch or 0.0),
            "train_runtime_s": round(runtime, 3),
            "trained_tokens": tokens,
            "tokens_per_s": round(tokens / runtime, 1) if tokens and runtime > 0 else None,
            "train_loss_mean": output.metrics.get("train_loss"),
        }
        if state.best_model_checkpoint:
            self.stats["best_checkpoint"] = {
                "step": int(Path(state.best_model_checkpoint).name.split("-")[-1]),
                "eval_loss": state.best_metric,
            }
        return self.stats

    def save(self) -> dict[str, Any]:
        assert self.resolved is not None
        model, state = self.trainer.model, None
        if self.config.fsdp:  # gathering the shards is collective: every rank takes part, rank 0 gets them
            state = self.trainer.accelerator.get_state_dict(model)
            model = self.trainer.accelerator.unwrap_model(model)
        if not self.leader:
            return {"save": None, "rank": self.ranks.rank}
        out = self.spec.staging_dir
        if self.config.finetune == "full":
            from tracebank.train.backends.trl_peft import save_whole

            info = save_whole(model, self.tokenizer, out, self.resolved.save_dtype, state)
        else:
            info = self.backend.save(model, self.tokenizer, out, self.spec, self.resolved)
        rest = {k: v for k, v in info.items() if k not in ("save", "dtype")}
        self.emit(ModelSaved(save=info.get("save"), dtype=info.get("dtype"), extra=rest))
        return info

    def cleanup(self) -> None:
        """Drop the model and trainer so accelerator memory is released before the process exits."""
        self.trainer = None
        gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:
            pass


#: Attention implementations that keep packed rows apart given per-row position ids and no mask.
PACKING_ATTENTION = ("sdpa", "eager", "flex_attention", "flash_attention_2", "flash_attention_3")


def prepare_packing(model: Any) -> None:
    """Refuse --packing where rows would attend to each other (an older transformers, another kernel),
    and turn the KV cache off: transformers reads row boundaries from position ids only without one."""
    from transformers import masking_utils

    implementation = getattr(model.config, "_attn_implementation", None)
    if not hasattr(masking_utils, "find_packed_sequence_indices"):
        raise TrainConfigError(
            "--packing needs transformers >= 4.54 to keep packed rows apart", "drop --packing"
        )
    if implementation not in PACKING_ATTENTION:
        raise TrainConfigError(
            f"--packing is not exact with attention {implementation!r}: packed rows would see each other",
            "drop --packing",
        )
    model.config.use_cache = False


def parameter_counts(model: Any) -> tuple[int, int]:
    """(trainable, total) parameters: PEFT's count for an adapter (it knows 4-bit packing), else the sums."""
    if hasattr(model, "get_nb_trainable_parameters"):
        trainable, total = model.get_nb_trainable_parameters()
        return int(trainable), int(total)
    params = list(model.parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


def is_loaded_in_4bit(model: Any) -> bool:
    """Whether ``model``'s weights really are 4-bit (bitsandbytes layers), whatever was requested."""
    if getattr(model, "is_loaded_in_4bit", False):
        return True
    return any(type(m).__name__ == "Linear4bit" for m in model.modules())


def _first_line(exc: BaseException) -> str:
    return first_line(exc, with_type=True)
