"""The only code that differs between backends: loading the model, attaching LoRA, saving.

Everything else (data, collation, SFTConfig, callbacks, evaluation, the run record) is
the shared path in `train.recipe`.
"""

from __future__ import annotations

from typing import Any, Protocol

from tracebank.train.config import Resolved


class Backend(Protocol):
    name: str

    def load(self, spec: dict[str, Any], resolved: Resolved) -> tuple[Any, Any]:
        """Return (model, tokenizer) loaded from ``spec['base_model']``."""

    def attach_adapter(self, model: Any, spec: dict[str, Any], resolved: Resolved) -> Any:
        """Return ``model`` with the LoRA adapter attached (only adapter weights trainable)."""

    def save(
        self, model: Any, tokenizer: Any, out_dir: str, spec: dict[str, Any], resolved: Resolved
    ) -> dict[str, Any]:
        """Write the trained model (merged or adapter) and tokenizer to ``out_dir``; say what was written."""


def linear_module_names(model: Any) -> list[str]:
    """The leaf names of every linear layer except the output head: what peft's ``all-linear`` means.

    Unsloth hands ``target_modules`` to peft as a list of names, so the shorthand
    ``all-linear`` would be looked up literally (peft's NoMatchingPeftModuleError);
    the backends pass this expansion instead. 4-bit layers (bitsandbytes) subclass
    ``torch.nn.Linear`` and are included.
    """
    import torch

    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    names = {
        name.rsplit(".", 1)[-1]
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear) and module is not output
    }
    return sorted(names)


def target_modules(model: Any, targets: list[str] | tuple[str, ...]) -> list[str]:
    """The LoRA targets as explicit module names (``all-linear`` expanded against ``model``)."""
    return linear_module_names(model) if list(targets) == ["all-linear"] else list(targets)


def get_backend(name: str) -> Backend:
    if name == "unsloth":
        from tracebank.train.backends.unsloth import UnslothBackend

        return UnslothBackend()
    from tracebank.train.backends.trl_peft import TrlPeftBackend

    return TrlPeftBackend()
