"""A tiny, randomly initialised Qwen2-style causal LM with its own tokenizer.

Tests, benchmarks and the demo need a real model and tokenizer but cannot
download one, so this builds both locally: a byte-level BPE tokenizer trained
with `tokenizers` on a small corpus shipped in the package, with a ChatML chat
template (what Qwen models use), and a Qwen2 config small enough to train on a
CPU in seconds. It has the seven projections Qwen-style LoRA targets name.
"""

from __future__ import annotations

from pathlib import Path

CORPUS = Path(__file__).with_name("data") / "tiny_corpus.txt"
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def build_tokenizer(out_dir: Path, vocab_size: int = 384):
    """Train a byte-level BPE tokenizer on the bundled corpus and save it to ``out_dir``."""
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
    fast.chat_template = CHAT_TEMPLATE
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
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    tokenizer = build_tokenizer(out)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        initializer_range=initializer_range,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(str(out))
    return out
