"""Provenance inside the model folder: a model card (README.md) and tracebank.json.

A model folder copied to another machine or pushed to a hub still says which dataset
version (and content hash) it was trained on, by which run, from which base model, with
which settings. Written into the staging folder, so it is published with the model.
``tracebank.json`` also marks the folder as one train wrote: ``--overwrite`` replaces
only such a folder (:func:`written_by_train`).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from tracebank.core.outputs import MARKER

PROVENANCE_FILE = "tracebank.json"
#: What model folders written before tracebank.json marked them hold instead: the output guard's
#: folder marker (one concept, owned by core.outputs), which then also named the run.
LEGACY_MARKER = MARKER
CARD_FILE = "README.md"
_KEYS = (
    "run_id",
    "dataset",
    "content_hash",
    "base_model",
    "backend",
    "save",
    "started_at",
    "hyperparameters",
)


def written_by_train(folder: Path, run_id: str | None = None) -> bool:
    """Whether ``folder`` holds a model train wrote: its tracebank.json (or, from older versions,
    its .tracebank-output.json) names a run, or with ``run_id`` names that run (what `train
    --resume` may replace: its own output, never another run's)."""
    for name in (PROVENANCE_FILE, LEGACY_MARKER):
        try:
            doc = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
        named = doc.get("run_id") if isinstance(doc, dict) else None
        if isinstance(named, str) and named and (run_id is None or named == run_id):
            return True
    return False


def provenance(record: Any) -> dict[str, Any]:
    """The small JSON document: where the model came from (a run record or its dict)."""
    is_record = dataclasses.is_dataclass(record) and not isinstance(record, type)
    doc = dataclasses.asdict(record) if is_record else dict(record)
    out = {k: doc.get(k) for k in _KEYS}
    out["data"] = doc.get("data") or {}
    out["libraries"] = doc.get("libraries") or {}
    return out


def _yaml_str(value: Any) -> str:
    return json.dumps("" if value is None else str(value))  # a JSON string is a valid YAML scalar


def model_card(prov: dict[str, Any]) -> str:
    """README.md text: YAML front matter (as model hubs read it) and a short human summary."""
    settings = "\n".join(
        f"| `{k}` | `{json.dumps(v)}` |" for k, v in sorted((prov.get("hyperparameters") or {}).items())
    )
    data = prov.get("data") or {}
    rows = ", ".join(f"{k}: {v}" for k, v in sorted(data.items()) if isinstance(v, int | float | str))
    return f"""---
base_model: {_yaml_str(prov.get("base_model"))}
library_name: transformers
tags:
- tracebank
- sft
- agent-lightning
---
# Fine-tuned by tracebank run `{prov.get("run_id")}`

- dataset version: `{prov.get("dataset")}` (content hash `{prov.get("content_hash")}`)
- base model: `{prov.get("base_model")}`
- backend: {prov.get("backend")}, saved as {prov.get("save")}, started {prov.get("started_at")}
- data: {rows or "n/a"}

Reproduce the data with `tracebank export {prov.get("dataset")}`; the run's losses are in
`tracebank runs show {prov.get("run_id")}`. The same facts, machine-readable, are in `{PROVENANCE_FILE}`.

| setting | value |
| --- | --- |
{settings}
"""


def write_model_card(folder: Path, record: Any) -> dict[str, Any]:
    """Write README.md and tracebank.json into ``folder``.

    PEFT's ``save_pretrained`` leaves a placeholder card ("More Information Needed");
    it is replaced.
    """
    prov = provenance(record)
    _write_text(folder / PROVENANCE_FILE, json.dumps(prov, indent=2, sort_keys=True, default=str) + "\n")
    _write_text(folder / CARD_FILE, model_card(prov))
    return prov


def _write_text(path: Path, text: str) -> None:
    # The model folder is still the unpublished staging folder: a rename is enough.
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
