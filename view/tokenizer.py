"""Loading a tokenizer for token views and the export round trip (transformers, lazily)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracebank.core.errors import first_line
from tracebank.view.errors import ViewError


def load_tokenizer(path: str | Path) -> Any:
    """The tokenizer saved in the folder ``path``; a one-line error when there is none."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise ViewError(
            f"no tokenizer folder at {folder}", "pass the base model's folder (nothing is downloaded)"
        )
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ViewError(f"cannot load a tokenizer from {folder}: {first_line(exc)}") from exc


def local_model_dir(models: list[str]) -> str | None:
    """The first of ``models`` (as the calls name them) that is a local folder with a tokenizer.

    A round served by tracebank names the model by its folder, and the stored ids are that
    tokenizer's; a hub name (``Qwen/Qwen3-4B``) is not looked up: nothing is downloaded.
    """
    for model in models:
        path = Path(model).expanduser()
        if path.is_absolute() and (path / "tokenizer_config.json").exists():
            return str(path)
    return None
