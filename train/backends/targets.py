"""LoRA target names as the backends hand them to peft."""

from __future__ import annotations

from typing import Any


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
