"""A judge model run in this process with transformers (``--judge FOLDER`` without ``--judge-url``).

The prompt is the rubric as one user message through the tokenizer's chat template (with the
generation prompt), or the rubric's text itself when the tokenizer has no template: the same
prompt an OpenAI-compatible server builds for ``/chat/completions``. One forward pass gives the
next-token distribution; the scale's tokens' probabilities, renormalised, weight the score.
"""

from __future__ import annotations

import hashlib
import zlib
from pathlib import Path
from typing import Any

from tracebank.rescore.errors import RescoreUsageError
from tracebank.rescore.geval import JudgeFailed, Judgment, weighted_mean


def folder_hash(folder: Path) -> str:
    """sha256 over the folder's files (relative path and content hash each): the judge's identity."""
    outer = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        inner = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                inner.update(block)
        outer.update(f"{path.relative_to(folder).as_posix()}\0{inner.hexdigest()}\n".encode())
    return outer.hexdigest()


def judge_prompt_ids(tokenizer: Any, prompt: str) -> list[int]:
    """The token ids whose next token is the judge's score."""
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
        )
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    return list(tokenizer(prompt)["input_ids"])


def scale_token_ids(tokenizer: Any, scale: list[int]) -> list[int]:
    """The one token of each scale value (a value that is several tokens cannot be weighted)."""
    ids = []
    for value in scale:
        encoded = tokenizer(str(value), add_special_tokens=False)["input_ids"]
        if len(encoded) != 1:
            raise RescoreUsageError(
                f"the judge's tokenizer splits scale value {value} into {len(encoded)} tokens"
            )
        ids.append(encoded[0])
    return ids


class LocalJudge:
    """A causal LM and its tokenizer, loaded once, judging prompt after prompt."""

    def __init__(self, folder: Path, scale: list[int], samples: int, temperature: float, seed: int) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.model = AutoModelForCausalLM.from_pretrained(str(folder), torch_dtype=torch.float32).eval()
        self.scale, self.samples, self.temperature, self.seed = scale, samples, temperature, seed
        self.scale_ids = scale_token_ids(self.tokenizer, scale)
        self.max_len = int(getattr(self.model.config, "max_position_embeddings", 0) or 0)

    def __call__(self, prompt: str, key: str) -> Judgment:
        import torch

        ids = judge_prompt_ids(self.tokenizer, prompt)
        if self.max_len and len(ids) > self.max_len:
            raise JudgeFailed(f"the judge prompt is longer than the judge's {self.max_len} positions")
        with torch.no_grad():
            logits = self.model(torch.tensor([ids])).logits[0, -1].double()
        scale_logits = logits[self.scale_ids]
        probs = torch.softmax(scale_logits, dim=-1).tolist()
        score = weighted_mean(dict(zip(self.scale, probs, strict=True)))
        if not self.samples:
            return Judgment(score)
        # seeded by the rollout, not its position: the same rollout gets the same samples in any run
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + zlib.crc32(key.encode()))
        drawn = torch.multinomial(
            torch.softmax(scale_logits / self.temperature, dim=-1),
            self.samples,
            replacement=True,
            generator=generator,
        )
        return Judgment(score, [float(self.scale[i]) for i in drawn.tolist()])
