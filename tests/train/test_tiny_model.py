"""The tiny model's tokenizer behaves as a real Qwen tokenizer where tests depend on it."""

from __future__ import annotations


def test_text_is_nfc_normalized_before_bpe_as_in_qwen(tokenizer):
    # Tests comparing decoded prompts with chat text rely on this: a reply the model spelled
    # decomposed comes back composed once it is sent again in a prompt.
    decomposed, composed = "be" + "r\u0323", "be\u1e5b"
    ids = tokenizer(decomposed, add_special_tokens=False)["input_ids"]
    assert ids == tokenizer(composed, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == composed
