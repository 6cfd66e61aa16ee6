"""Checks that run before any training, each failing with one actionable line.

They read the base model's config.json and the tensor names in its safetensors headers
(plain JSON at the start of each file), so they cost milliseconds and import no torch:
a dataset built with another tokenizer or a LoRA target that matches nothing is caught
before a GPU is touched.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracebank.train.config import TrainConfig
from tracebank.train.dataset import DatasetVersion, SplitScan, scan_preference_split, scan_split
from tracebank.train.errors import TrainError

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


@dataclass
class ModelFacts:
    """What the checks need to know about a base model folder."""

    path: Path
    model_type: str | None
    vocab_size: int
    max_positions: int | None
    #: dotted names of modules that own a 2-D weight (linear layers, embeddings); None when unknown
    matrix_modules: list[str] | None = None
    config: dict[str, Any] = field(default_factory=dict)


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    # Multimodal configs keep the language model's numbers under text_config.
    return config.get("text_config") or config


def _safetensors_header(path: Path) -> dict[str, Any]:
    with open(path, "rb") as fh:
        raw = fh.read(8)
        if len(raw) != 8:
            raise ValueError("file shorter than a safetensors header")
        (size,) = struct.unpack("<Q", raw)
        if size > 100 * 2**20:
            raise ValueError("implausible safetensors header size")
        return json.loads(fh.read(size))


def _matrix_modules(folder: Path) -> list[str] | None:
    """Module names with a 2-D ``.weight`` tensor, read from the safetensors headers."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    names: set[str] = set()
    for path in files:
        try:
            header = _safetensors_header(path)
        except (OSError, ValueError):
            return None  # unreadable here; the child's load will say what is wrong
        for tensor, info in header.items():
            if tensor.endswith(".weight") and isinstance(info, dict) and len(info.get("shape", [])) == 2:
                names.add(tensor[: -len(".weight")])
    return sorted(names)


def model_facts(base_model: str | Path) -> ModelFacts:
    folder = Path(base_model).expanduser()
    if not folder.is_dir():
        raise TrainError(
            f"base model folder {folder} does not exist",
            "pass --base-model a local folder holding config.json, weights and tokenizer",
        )
    config_path = folder / "config.json"
    if not config_path.exists():
        raise TrainError(f"{folder} has no config.json", "is this a Hugging Face model folder?")
    try:
        config = json.loads(config_path.read_text())
    except ValueError as exc:
        raise TrainError(f"{config_path} is not valid JSON: {exc}") from exc
    if not any((folder / name).exists() for name in TOKENIZER_FILES):
        raise TrainError(
            f"{folder} holds no tokenizer",
            "save the tokenizer next to the weights (tokenizer.save_pretrained)",
        )
    text = _text_config(config)
    vocab = text.get("vocab_size")
    if not isinstance(vocab, int):
        raise TrainError(f"{config_path} has no vocab_size")
    return ModelFacts(
        path=folder,
        model_type=config.get("model_type"),
        vocab_size=vocab,
        max_positions=text.get("max_position_embeddings"),
        matrix_modules=_matrix_modules(folder),
        config=config,
    )


def matches(module_name: str, target: str) -> bool:
    """PEFT's rule for a plain target name: the whole name or its last dotted parts."""
    return module_name == target or module_name.endswith("." + target)


def check_targets(targets: tuple[str, ...] | list[str], module_names: list[str], where: str) -> None:
    """Every LoRA target must name at least one module (a typo otherwise trains a smaller adapter)."""
    if list(targets) == ["all-linear"]:
        return
    missing = [t for t in targets if not any(matches(m, t) for m in module_names)]
    if missing:
        leaves = sorted({m.rsplit(".", 1)[-1] for m in module_names})
        raise TrainError(
            f"LoRA target(s) {', '.join(missing)} match no module in {where}",
            f"its weight matrices are named {', '.join(leaves)}; pass --target-modules with those",
        )


@dataclass
class Plan:
    """What the checks decided: the max length to train with and rows to leave out."""

    max_length: int
    dataset_max_length: int
    max_token_id: int
    rows: dict[str, int]
    #: per split, row indices to keep when truncation dropped rows with no trained token left
    keep_rows: dict[str, list[int]] = field(default_factory=dict)
    truncated_rows: int = 0
    dropped_rows: int = 0
    trained_tokens: int = 0


def plan(config: TrainConfig, version: DatasetVersion, facts: ModelFacts) -> Plan:
    """Run every data-versus-model check; return the lengths the child trains with."""
    if facts.matrix_modules is not None and config.finetune == "lora":
        check_targets(config.target_modules, facts.matrix_modules, str(facts.path))
    preference = version.record.kind == "preference"
    if preference != (config.method == "dpo"):
        raise TrainError(
            f"dataset {version.label} is a {version.record.kind} version; --method {config.method} "
            f"trains on {'preference' if config.method == 'dpo' else 'sft'} versions",
            "pass --method dpo for preference pairs (transform --kind preference), else --method sft",
        )
    files = version.split_files()
    scan = scan_preference_split if preference else scan_split
    scans: dict[str, SplitScan] = {split: scan(paths) for split, paths in files.items()}
    max_token_id = max(s.max_token_id for s in scans.values())
    min_token_id = min(s.min_token_id for s in scans.values())
    dataset_max = max((max(s.lengths) for s in scans.values() if s.lengths), default=0)
    if scans["train"].rows == 0:
        raise TrainError(f"dataset {version.label} has an empty train split")
    if max_token_id >= facts.vocab_size or min_token_id < 0:
        bad = max_token_id if max_token_id >= facts.vocab_size else min_token_id
        raise TrainError(
            f"dataset {version.label} holds token id {bad}, outside {facts.path.name}'s vocabulary "
            f"of {facts.vocab_size}",
            "the dataset was built with another tokenizer; train the model that served the rollouts",
        )
    max_length = config.max_length or dataset_max
    result = Plan(
        max_length=max_length,
        dataset_max_length=dataset_max,
        max_token_id=max_token_id,
        rows={split: s.rows for split, s in scans.items()},
        trained_tokens=sum(s.trained_tokens for s in scans.values()),
    )
    if facts.max_positions and max_length > facts.max_positions:
        raise TrainError(
            f"max length {max_length} exceeds the model's {facts.max_positions} positions",
            f"pass --max-length {facts.max_positions} --truncate, or use a longer-context model",
        )
    if dataset_max > max_length:
        too_long = sum(length > max_length for s in scans.values() for length in s.lengths)
        if not config.truncate:
            raise TrainError(
                f"{too_long} row(s) of {version.label} are longer than --max-length {max_length} "
                f"(longest: {dataset_max} tokens)",
                f"pass --truncate to cut them, or --max-length {dataset_max}",
            )
        result.truncated_rows = too_long
        for split, s in scans.items():
            keep = [i for i, first in enumerate(s.first_trained) if first < max_length]
            if len(keep) < s.rows:
                result.keep_rows[split] = keep
                result.dropped_rows += s.rows - len(keep)
        if "train" in result.keep_rows and not result.keep_rows["train"]:
            raise TrainError(
                f"truncating to {max_length} tokens leaves no trained token in any train row",
                "raise --max-length",
            )
    return result
