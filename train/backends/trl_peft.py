"""TRL + PEFT: runs wherever PyTorch runs (CUDA, MPS, CPU)."""

from __future__ import annotations

import tempfile
from typing import Any

from tracebank.train.config import Resolved
from tracebank.train.spec import ChildSpec


def _dtype(name: str) -> Any:
    import torch

    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[name]


class TrlPeftBackend:
    name = "trl"

    def load(self, spec: ChildSpec, resolved: Resolved) -> tuple[Any, Any]:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = spec.base_model
        tokenizer = AutoTokenizer.from_pretrained(path)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        # On CUDA the weights are held in bf16 (or quantized); on CPU and MPS in float32.
        dtype = _dtype("bfloat16" if resolved.bf16 else "float32")
        kwargs: dict[str, Any] = {"dtype": dtype}
        if spec.config.attn_implementation:
            kwargs["attn_implementation"] = spec.config.attn_implementation
        if resolved.load_in_4bit:
            from transformers import BitsAndBytesConfig

            kwargs["quantization_config"] = BitsAndBytesConfig(
                load_in_4bit=True,
                bnb_4bit_quant_type="nf4",
                bnb_4bit_use_double_quant=True,
                bnb_4bit_compute_dtype=_dtype("bfloat16" if resolved.bf16 else "float16"),
            )
            kwargs["device_map"] = {"": 0}
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
        if resolved.load_in_4bit:
            from peft import prepare_model_for_kbit_training

            model = prepare_model_for_kbit_training(
                model, use_gradient_checkpointing=resolved.gradient_checkpointing
            )
        return model, tokenizer

    def attach_adapter(self, model: Any, spec: ChildSpec, resolved: Resolved) -> Any:
        from peft import LoraConfig, get_peft_model

        config = spec.config
        targets = config.target_modules
        lora = LoraConfig(
            r=config.lora_r,
            lora_alpha=config.lora_alpha,
            lora_dropout=config.lora_dropout,
            target_modules=targets[0] if list(targets) == ["all-linear"] else list(targets),
            bias="none",
            task_type="CAUSAL_LM",
        )
        return get_peft_model(model, lora)

    def save(
        self, model: Any, tokenizer: Any, out_dir: str, spec: ChildSpec, resolved: Resolved
    ) -> dict[str, Any]:
        method = spec.config.save
        if method == "lora":
            model.save_pretrained(out_dir)
            tokenizer.save_pretrained(out_dir)
            return {"save": "lora", "files": "adapter_model.safetensors + adapter_config.json"}
        dtype = _dtype(resolved.save_dtype)
        if resolved.load_in_4bit:
            # Merging into 4-bit weights would bake quantization error into the 16-bit model:
            # reload the base in 16 bits and merge the trained adapter into that instead.
            from peft import PeftModel
            from transformers import AutoModelForCausalLM

            with tempfile.TemporaryDirectory(dir=spec.scratch_dir) as adapter_dir:
                model.save_pretrained(adapter_dir)
                base = AutoModelForCausalLM.from_pretrained(spec.base_model, dtype=dtype)
                merged = PeftModel.from_pretrained(base, adapter_dir).merge_and_unload()
        else:
            merged = model.merge_and_unload()
        merged = merged.to(dtype)
        merged.save_pretrained(out_dir)
        tokenizer.save_pretrained(out_dir)
        return {"save": "merged_16bit", "dtype": resolved.save_dtype}


def save_whole(
    model: Any, tokenizer: Any, out_dir: str, dtype_name: str, state_dict: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Write a fully fine-tuned model in ``dtype_name`` (from ``state_dict`` when FSDP gathered it)."""
    dtype = _dtype(dtype_name)
    if state_dict is None:
        model.to(dtype).save_pretrained(out_dir)
    else:
        weights = {k: v.to(dtype) if v.is_floating_point() else v for k, v in state_dict.items()}
        model.save_pretrained(out_dir, state_dict=weights)
        # save_pretrained wrote the module's dtype (float32: accelerate upcasts trainable weights),
        # not the dtype of the weights it was handed: config.json must name the one on disk.
        model.config.dtype = dtype_name
        model.config.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return {"save": "full", "dtype": dtype_name}
