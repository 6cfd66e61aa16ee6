"""Unsloth: the anchor's path on CUDA (fast kernels, 4-bit load, its own merged save).

Only imported in the training child, and before trl, because Unsloth patches transformers
and TRL when it is imported (the child imports this module before the shared recipe).
"""

from __future__ import annotations

from typing import Any

from tracebank.train.backends.targets import target_modules
from tracebank.train.config import Resolved
from tracebank.train.spec import ChildSpec


class UnslothBackend:
    name = "unsloth"

    def __init__(self) -> None:
        import unsloth  # noqa: F401  (must precede trl / transformers / peft)

    def load(self, spec: ChildSpec, resolved: Resolved) -> tuple[Any, Any]:
        from unsloth import FastLanguageModel

        model, tokenizer = FastLanguageModel.from_pretrained(
            model_name=spec.base_model,
            max_seq_length=spec.max_length,
            load_in_4bit=resolved.load_in_4bit,
            dtype=None,
            **({"attn_implementation": attn} if (attn := spec.config.attn_implementation) else {}),
        )
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        return model, tokenizer

    def attach_adapter(self, model: Any, spec: ChildSpec, resolved: Resolved) -> Any:
        from unsloth import FastLanguageModel

        config = spec.config
        return FastLanguageModel.get_peft_model(
            model,
            r=config.lora_r,
            lora_alpha=config.lora_alpha,
            lora_dropout=config.lora_dropout,
            target_modules=target_modules(model, config.target_modules),
            bias="none",
            use_gradient_checkpointing="unsloth" if resolved.gradient_checkpointing else False,
            random_state=config.seed,
            max_seq_length=spec.max_length,
        )

    def save(
        self, model: Any, tokenizer: Any, out_dir: str, spec: ChildSpec, resolved: Resolved
    ) -> dict[str, Any]:
        method = spec.config.save
        model.save_pretrained_merged(out_dir, tokenizer, save_method=method)
        return {"save": method, "dtype": "16-bit (unsloth)" if method == "merged_16bit" else None}
