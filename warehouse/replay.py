"""What a record read from a warehouse may decide when it is replayed or resumed: the one allow-list.

A run record (`runs show --format yaml`, `train --resume`) and a dataset manifest
(`datasets show --format yaml`) are data, never authority: whoever can write the warehouse wrote
them. Replaying one carries what shapes the data and the model (dataset, base model and revision,
method and its hyperparameters, selection and rule parameters) and nothing that chooses where
tracebank connects or writes: never the distributed settings (``nnodes``, ``node_rank``,
``rdzv_endpoint``, ``nproc_per_node``), the transform engine or its Ray ``address``, ``force``,
``overwrite``, ``output``, the warehouse, or a trainer key beyond :data:`TRAINER_EXTRA_REPLAYED`.

Settings are keyed by the option's parameter name (a config dataclass's field names; a transform's
``agl1`` and ``preference`` fields flattened, as its command line has them). Standard library only.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

#: The settings of a run record a replay or a resume takes: what the model is trained on, from
#: what, how. ``report_to`` (where metrics are sent) and everything distributed or about the output
#: are left out.
TRAIN_REPLAYED = frozenset(
    {
        "dataset",
        "base_model",
        "backend",
        "save",
        "finetune",
        "method",
        "beta",
        "dpo_loss",
        "lora_r",
        "lora_alpha",
        "lora_dropout",
        "target_modules",
        "learning_rate",
        "batch_size",
        "grad_accum",
        "warmup_steps",
        "lr_scheduler",
        "weight_decay",
        "max_grad_norm",
        "seed",
        "epochs",
        "max_steps",
        "max_length",
        "truncate",
        "load_in_4bit",
        "optim",
        "bf16",
        "gradient_checkpointing",
        "eval_strategy",
        "eval_steps",
        "early_stopping_patience",
        "logging_steps",
        "save_steps",
        "save_total_limit",
        "packing",
        "attn_implementation",
        "fsdp",
        "timeout",
        "extra",
    }
)

#: Trainer (SFTConfig / TrainingArguments) keys a record's ``extra`` may set: numerical and
#: optimizer knobs only, each a number or a bool. Nothing that names a hub, a path, a URL, a
#: callback, a report target or code.
TRAINER_EXTRA_REPLAYED = frozenset(
    {
        "adam_beta1",
        "adam_beta2",
        "adam_epsilon",
        "label_smoothing_factor",
        "warmup_ratio",
        "neftune_noise_alpha",
        "dataloader_drop_last",
    }
)

#: Attention kernels a record may name (transformers also loads kernels named by a hub repository:
#: code a record must never choose).
ATTENTION_KERNELS = frozenset({"eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention"})

#: The settings of a dataset manifest's ``config`` a replay takes: what the rows are. Never
#: ``engine``, ``address`` (where to build) or ``force`` (whether to write an identical version).
TRANSFORM_REPLAYED = frozenset(
    {
        "name",
        "collections",
        "top_fraction",
        "seed",
        "min_reward",
        "select_by",
        "per_task",
        "val_fraction",
        "max_length",
        "dedup",
        "merge",
        "rules",
        "level",
        "max_prompt_length",
        "max_response_length",
        "max_total_length",
        "reward_fillna_value",
        "kind",
        "min_margin",
        "pairs_per_task",
        "pairing",
        "unit",
        "rewards",
    }
)

#: Options a ``--config`` file may not hold: where tracebank reads and where it connects come
#: from the command line or the environment only (a config file may be a replayed record).
COMMAND_LINE_ONLY = {
    "warehouse": "-w or $TRACEBANK_WAREHOUSE",
    "address": "--address or $RAY_ADDRESS",
    "rdzv_endpoint": "--rdzv-endpoint",
}


def _scalar(value: Any) -> bool:
    """A JSON scalar a setting may hold (a finite number, a bool, a string, null)."""
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, str | int | bool)


def _plain(value: Any) -> bool:
    """A scalar, or a list of strings (``target_modules``, ``collections``)."""
    return _scalar(value) or (isinstance(value, list) and all(isinstance(v, str) for v in value))


def _number(value: Any) -> bool:
    return isinstance(value, bool | int) or (isinstance(value, float) and math.isfinite(value))


_VALUE_CHECKS: dict[str, Callable[[Any], bool]] = {
    "attn_implementation": lambda v: v is None or v in ATTENTION_KERNELS,
}


@dataclass(frozen=True)
class Replay:
    """What a record may decide (``settings``) and which of its other settings mattered."""

    settings: dict[str, Any]
    """The allowed settings, as recorded."""
    dropped: tuple[str, ...]
    """Settings left out whose recorded value differs from the default (``extra.KEY`` for a trainer
    key), in the record's order."""

    def dropped_line(self, ignore: tuple[str, ...] = ()) -> str | None:
        """One line naming what was left out, or None when nothing that mattered was."""
        names = [n for n in self.dropped if n not in ignore]
        if not names:
            return None
        return f"not replayed (a record never decides them): {', '.join(names)}"


def _default(fld: dataclasses.Field[Any]) -> Any:
    if fld.default is not dataclasses.MISSING:
        return fld.default
    if fld.default_factory is not dataclasses.MISSING:
        return fld.default_factory()
    return dataclasses.MISSING  # a required field: any recorded value mattered


def defaults_of(*classes: type) -> dict[str, Any]:
    """Each field of the config dataclasses ``classes`` -> its default (later classes win)."""
    return {f.name: _default(f) for cls in classes for f in dataclasses.fields(cls)}


def _same(value: Any, default: Any) -> bool:
    if isinstance(default, tuple):
        default = list(default)
    return value is None if default is dataclasses.MISSING else value == default


def replayable(recorded: Mapping[str, Any], allowed: frozenset[str], defaults: Mapping[str, Any]) -> Replay:
    """The settings of ``recorded`` in ``allowed`` whose values have a plain shape and pass their
    check; the others are named when their value is not the default."""
    settings: dict[str, Any] = {}
    dropped: list[str] = []
    for name, value in recorded.items():
        check = _VALUE_CHECKS.get(name, _plain)
        if name in allowed and name != "extra" and check(value):
            settings[name] = value
        elif name != "extra" and not _same(value, defaults.get(name, dataclasses.MISSING)):
            dropped.append(name)
    return Replay(settings, tuple(dropped))


def trainer_extra(extra: Any) -> Replay:
    """The keys of a recorded ``extra`` a replay takes (:data:`TRAINER_EXTRA_REPLAYED`, numbers and
    bools only); every other key is named as ``extra.KEY``."""
    if not isinstance(extra, Mapping):
        return Replay({}, ("extra",) if extra else ())
    kept = {k: v for k, v in extra.items() if k in TRAINER_EXTRA_REPLAYED and _number(v)}
    return Replay(kept, tuple(f"extra.{k}" for k in extra if k not in kept))


def replay_train(hyperparameters: Mapping[str, Any], defaults: Mapping[str, Any]) -> Replay:
    """What a run record's ``hyperparameters`` may decide for ``train --config`` or ``--resume``."""
    base = replayable(hyperparameters, TRAIN_REPLAYED, defaults)
    extra = trainer_extra(hyperparameters.get("extra") or {})
    settings = {**base.settings, "extra": extra.settings} if extra.settings else base.settings
    return Replay(settings, base.dropped + extra.dropped)


def replay_transform(config: Mapping[str, Any], defaults: Mapping[str, Any]) -> Replay:
    """What a dataset manifest's (flattened) ``config`` may decide for ``transform --config``."""
    return replayable(config, TRANSFORM_REPLAYED, defaults)
