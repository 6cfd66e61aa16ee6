"""A tiny, randomly initialised Qwen2-style causal LM with its own tokenizer.

Tests, benchmarks and the demo need a real model and tokenizer but cannot
download one, so this builds both locally: a byte-level BPE tokenizer trained
with `tokenizers` on a small corpus shipped in the package, with a ChatML chat
template (what Qwen models use), and a Qwen2 config small enough to train on a
CPU in seconds. It has the seven projections Qwen-style LoRA targets name.

``build_tiny_qwen3_model`` is the variant the real vLLM CPU build serves: its CPU
attention refuses head_dim 16, so that one has head_dim 64, and its tokenizer knows
the hermes ``<tool_call>`` tags and renders tools the way Qwen's template does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CORPUS = Path(__file__).with_name("data") / "tiny_corpus.txt"
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


#: Qwen's tool rendering, reduced: the tools in a system block, tool calls as hermes ``<tool_call>`` JSON.
TOOL_CHAT_TEMPLATE = (
    "{%- if tools %}{{ '<|im_start|>system\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{ messages[0]['content'] + '\n\n' }}{%- endif %}"
    "{{ '# Tools\n<tools>' }}{%- for tool in tools %}{{ '\n' + (tool | tojson) }}{%- endfor %}"
    "{{ '\n</tools><|im_end|>\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if not (tools and loop.first and message['role'] == 'system') %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{%- if message['content'] %}{{ message['content'] }}{%- endif %}"
    "{%- if message['tool_calls'] is defined and message['tool_calls'] %}"
    "{%- for call in message['tool_calls'] %}{%- set f = call['function'] %}"
    "{{ '<tool_call>\n{\"name\": \"' + f['name'] + '\", \"arguments\": ' }}"
    "{%- if f['arguments'] is string %}{{ f['arguments'] }}"
    "{%- else %}{{ f['arguments'] | tojson }}{%- endif %}"
    "{{ '}\n</tool_call>' }}{%- endfor %}{%- endif %}"
    "{{ '<|im_end|>\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{%- endif %}"
)
#: Plain added tokens (not special), as in Qwen: the hermes parser looks for them in the text.
TOOL_TOKENS = ["<tool_call>", "</tool_call>"]


def build_tokenizer(out_dir: Path, vocab_size: int = 384, tools: bool = False):
    """Train a byte-level BPE tokenizer on the bundled corpus and save it to ``out_dir``.

    With ``tools`` it also knows the hermes tool-call tags and renders ``tools``.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train([str(CORPUS)], trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
    )
    fast.chat_template = TOOL_CHAT_TEMPLATE if tools else CHAT_TEMPLATE
    if tools:
        fast.add_tokens(TOOL_TOKENS)
    out_dir.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(out_dir))
    return fast


def build_tiny_model(
    out_dir: Path | str,
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    initializer_range: float = 0.02,
) -> Path:
    """Write a tokenizer and a random-init Qwen2 causal LM to ``out_dir``; return it.

    Deterministic for a given ``seed``: the same call writes the same weights. A larger
    ``initializer_range`` (e.g. 0.2) gives the tied embedding enough norm for a LoRA
    adapter alone to memorise a handful of answers in a few dozen CPU steps; with the
    default 0.02 the logits stay near uniform whatever the adapter learns.
    """
    from transformers import Qwen2Config, Qwen2ForCausalLM

    dims = {"hidden_size": hidden_size, "intermediate_size": hidden_size * 2, "num_hidden_layers": num_layers}
    heads = {"num_attention_heads": 4, "num_key_value_heads": 2}
    return _save_random_model(
        Path(out_dir), Qwen2Config, Qwen2ForCausalLM, False, seed, initializer_range, **dims, **heads
    )


def build_tiny_qwen3_model(out_dir: Path | str, seed: int = 0, initializer_range: float = 0.2) -> Path:
    """A tiny random-init Qwen3 that the vLLM CPU build serves (head_dim 64), with a tool-aware tokenizer.

    Hidden size 128, 2 attention heads, 1 KV head, 2 layers: vLLM's CPU attention
    refuses smaller head dimensions. Deterministic for a given ``seed``.
    """
    from transformers import Qwen3Config, Qwen3ForCausalLM

    dims = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "head_dim": 64}
    heads = {"num_attention_heads": 2, "num_key_value_heads": 1}
    return _save_random_model(
        Path(out_dir), Qwen3Config, Qwen3ForCausalLM, True, seed, initializer_range, **dims, **heads
    )


def _save_random_model(
    out: Path,
    config_class: Any,
    model_class: Any,
    tools: bool,
    seed: int,
    initializer_range: float,
    **dims: Any,
) -> Path:
    """Write the tokenizer and a seeded random-init model of ``model_class`` with ``dims`` to ``out``."""
    import torch

    tokenizer = build_tokenizer(out, tools=tools)
    config = config_class(
        vocab_size=len(tokenizer),
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        initializer_range=initializer_range,
        **dims,
    )
    torch.manual_seed(seed)
    model = model_class(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(str(out))
    return out
