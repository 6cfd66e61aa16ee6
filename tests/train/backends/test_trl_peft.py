"""The TRL+PEFT backend's saving, checked on CPU without training."""

from __future__ import annotations

import json

from tracebank.train.backends.trl_peft import save_whole


def test_gathered_weights_are_saved_with_the_dtype_their_config_names(tiny_model, tmp_path):
    """FSDP hands save_whole the gathered state of a model accelerate upcast to float32; the weights
    are written in bf16, and config.json must say bf16 too (save_pretrained writes ``model.dtype``)."""
    import torch
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    out = tmp_path / "full"

    save_whole(model, tokenizer, str(out), "bfloat16", state_dict=model.state_dict())

    with safe_open(str(out / "model.safetensors"), "pt") as weights:
        dtypes = {weights.get_tensor(name).dtype for name in weights.keys()}  # noqa: SIM118
    assert dtypes == {torch.bfloat16}
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
