"""What the training child is told to do: :class:`ChildSpec`, written by the runner, read by the child.

The spec crosses a process boundary as a file (``spec.json`` in a private temporary folder of the
runner's, outside the warehouse), so it is plain JSON, checked strictly when read: a missing,
unknown or wrongly typed key is refused in one line, never guessed at. Never pickle: a file is
data, and unpickling runs whatever it names.
"""

from __future__ import annotations

import dataclasses
import json
import os
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracebank.train.config import TrainConfig
from tracebank.train.errors import TrainConfigError, TrainError
from tracebank.warehouse.records import checked_value

#: Said with every refused spec: the runner writes it moments before the child starts.
_HINT = "the training spec is written by tracebank train; start the run again"


@dataclass(frozen=True)
class ChildSpec:
    """One training child's instructions: the config, the data, the limits the checks found, the folders."""

    config: TrainConfig
    """The run's training config (validated again when read)."""
    base_model: str
    """Local folder of the base model (a hub id already resolved to its cache folder)."""
    splits: dict[str, list[str]]
    """Parquet files of each split of the dataset version (``train``, ``validation``)."""
    keep_rows: dict[str, list[int]]
    """Per split, the row indices to train on when truncation dropped rows (absent split: all rows)."""
    max_length: int
    """Longest row in tokens the trainer sees."""
    truncate: bool
    """Whether rows longer than ``max_length`` are cut (else none is that long)."""
    max_token_id: int
    """Largest token id in the data: the child checks it against the model's embedding."""
    staging_dir: str
    """Folder the finished model is written to, renamed to the output at the end."""
    scratch_dir: str
    """The run's scratch folder: dataset caches and resumable checkpoints."""
    events: str
    """The FIFO the child writes its events into, one JSON line each."""
    content_hash: str | None
    """The dataset version's content hash (every rank compares it before step 1)."""
    logging_dir: str
    """Folder for trackers that write files (tensorboard), beside the run record."""
    resume_from: str | None = None
    """Checkpoint folder a resumed attempt continues from."""

    def to_json(self) -> dict[str, Any]:
        """The JSON object the spec file holds."""
        return {**dataclasses.asdict(self), "config": self.config.to_dict()}

    def write(self, path: Path) -> None:
        """Write the spec to ``path``, owner-only. Whatever was there is removed first and the file is
        created anew (never followed: a link planted in the scratch folder is not written through)."""
        path.unlink(missing_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        with os.fdopen(os.open(path, flags, 0o600), "w", encoding="utf-8") as fh:
            json.dump(self.to_json(), fh, indent=2)

    @classmethod
    def from_json(cls, data: Any, source: str) -> ChildSpec:
        """The spec ``data`` describes; a one-line TrainError naming ``source`` if it is not one."""
        try:
            return cls._from_json(data)
        except (ValueError, TypeError, TrainConfigError) as exc:
            raise TrainError(f"{source} is not a training spec: {_message(exc)}", _HINT) from exc

    @classmethod
    def _from_json(cls, data: Any) -> ChildSpec:
        if not isinstance(data, dict):
            raise ValueError(f"it holds a {type(data).__name__}, not an object")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - set(fields))
        missing = [n for n, f in fields.items() if n not in data and f.default is dataclasses.MISSING]
        if unknown or missing:
            raise ValueError("; ".join(_listed(unknown, "unknown key") + _listed(missing, "missing key")))
        hints = typing.get_type_hints(cls)
        values = {
            name: checked_value(value, hints[name], name) for name, value in data.items() if name != "config"
        }
        for name in ("splits", "keep_rows"):  # `checked_value` sees an object, not what it maps to
            item = typing.get_args(hints[name])[1]
            for key, value in values[name].items():
                checked_value(value, item, f"{name}.{key}")
        return cls(config=_config(data["config"]), **values)

    @classmethod
    def read(cls, path: Path) -> ChildSpec:
        """The spec in the file at ``path`` (not through a link); a one-line TrainError if it is none."""
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            with os.fdopen(fd, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError) as exc:
            raise TrainError(f"cannot read training spec {path}: {_message(exc)}", _HINT) from exc
        return cls.from_json(data, f"training spec {path}")


def _config(data: Any) -> TrainConfig:
    """The TrainConfig of the spec's ``config`` object: each known option of its type, then validated."""
    if not isinstance(data, dict):
        raise ValueError(f"config should be an object, not {type(data).__name__}")
    hints = typing.get_type_hints(TrainConfig)
    for name, value in data.items():
        if name in hints:  # an unknown one is TrainConfig.from_dict's to refuse
            hint = list[str] if typing.get_origin(hints[name]) is tuple else hints[name]  # JSON has no tuple
            checked_value(value, hint, f"config.{name}")
    return TrainConfig.from_dict(data).validate()


def _listed(names: list[str], what: str) -> list[str]:
    return [f"{what}{'s' if len(names) > 1 else ''} {', '.join(names)}"] if names else []


def _message(exc: BaseException) -> str:
    """The first line of an error's text (a JSON or config error may run over several)."""
    text = exc.message if isinstance(exc, TrainConfigError) else str(exc)
    lines = text.strip().splitlines()
    return lines[0] if lines else type(exc).__name__
