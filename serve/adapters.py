"""LoRA adapter folders (what ``tracebank train --save lora`` writes): their base model and rank."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tracebank.serve.errors import ServeUsageError


def adapter_config(folder: Path) -> dict[str, Any] | None:
    """The ``adapter_config.json`` of a PEFT adapter folder, or None when ``folder`` is not one."""
    path = Path(folder) / "adapter_config.json"
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_text())
    except ValueError as exc:
        raise ServeUsageError(f"{path} is not valid JSON: {exc}") from exc
    return config if isinstance(config, dict) else None


def adapter_base(folder: Path) -> Path | None:
    """The local base model folder an adapter was trained on; None when ``folder`` is not an adapter."""
    config = adapter_config(folder)
    if config is None:
        return None
    base = config.get("base_model_name_or_path")
    if not base or not (Path(base) / "config.json").is_file():
        raise ServeUsageError(
            f"the adapter in {folder} names base model {base!r}, which is not a local model folder",
            "serve an adapter trained from a local base model folder, or pass the merged model",
        )
    return Path(base)


def adapter_rank(folder: Path) -> int:
    """The LoRA rank ``r`` of an adapter folder (the largest, when ``rank_pattern`` varies it)."""
    config = adapter_config(folder)
    if config is None:
        raise ServeUsageError(
            f"{folder} has no adapter_config.json, so it is not a LoRA adapter folder",
            "pass the folder `tracebank train --save lora` wrote",
        )
    ranks = [int(config.get("r") or 0), *(int(v) for v in (config.get("rank_pattern") or {}).values())]
    return max(ranks)
