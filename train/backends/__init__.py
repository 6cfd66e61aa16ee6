"""The only code that differs between backends: loading the model, attaching LoRA, saving.

Everything else (data, collation, SFTConfig, callbacks, evaluation, the run record) is
the shared path in `train.recipe`.
"""

from __future__ import annotations

from typing import Any, Protocol

from tracebank.train.config import Resolved
from tracebank.train.spec import ChildSpec


class Backend(Protocol):
    name: str

    def load(self, spec: ChildSpec, resolved: Resolved) -> tuple[Any, Any]:
        """Return (model, tokenizer) loaded from ``spec.base_model``."""

    def attach_adapter(self, model: Any, spec: ChildSpec, resolved: Resolved) -> Any:
        """Return ``model`` with the LoRA adapter attached (only adapter weights trainable)."""

    def save(
        self, model: Any, tokenizer: Any, out_dir: str, spec: ChildSpec, resolved: Resolved
    ) -> dict[str, Any]:
        """Write the trained model (merged or adapter) and tokenizer to ``out_dir``; say what was written."""


def get_backend(name: str) -> Backend:
    if name == "unsloth":
        from tracebank.train.backends.unsloth import UnslothBackend

        return UnslothBackend()
    from tracebank.train.backends.trl_peft import TrlPeftBackend

    return TrlPeftBackend()
