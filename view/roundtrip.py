"""Do a row's stored token ids equal the model's chat template applied to its messages?

The ids are what vLLM generated, so text re-tokenized through the template can differ:
a reply cut by max-tokens has no end-of-turn token, bytes that are not valid UTF-8 do
not survive decoding, and BPE can spell the same text with other tokens. Each row that
does not round-trip gets the first of these reasons that applies.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tracebank.view.conversation import DatasetRow, Message

OK = "ok"
OK_TRAILING = "ok (the template adds only whitespace after the reply)"
NO_MESSAGES = "no messages recorded for its call"
PROMPT_DIFFERS = "prompt ids differ from the chat template's rendering of its messages"
CUT = "reply cut before its end-of-turn token (a max-tokens stop)"
NOT_CANONICAL = "reply ids do not re-encode to themselves (invalid UTF-8 or another BPE spelling)"
REPLY_DIFFERS = "reply ids differ from the chat template's rendering of the reply"


@dataclass
class RoundTrip:
    """How many rows round-trip, and why the others do not."""

    rows: int = 0
    reasons: Counter[str] = field(default_factory=Counter)

    def add(self, verdict: str) -> None:
        self.rows += 1
        self.reasons[verdict] += 1

    @property
    def matched(self) -> int:
        return self.reasons[OK] + self.reasons[OK_TRAILING]

    def summary(self, tokenizer: str) -> str:
        text = (
            f"{self.matched} of {self.rows} rows round-trip to the stored token ids "
            f"with the chat template of {tokenizer}"
        )
        others = [
            f"{n} {reason}" for reason, n in self.reasons.most_common() if reason not in (OK, OK_TRAILING)
        ]
        if self.reasons[OK_TRAILING]:
            others.insert(0, f"{self.reasons[OK_TRAILING]} of them {OK_TRAILING[3:-1]}")
        return text + (": " + "; ".join(others) if others else "")


def _template(tokenizer: Any, messages: list[Message], generation_prompt: bool) -> list[int]:
    out = tokenizer.apply_chat_template(
        [m.openai() for m in messages], tokenize=True, add_generation_prompt=generation_prompt
    )
    ids = out["input_ids"] if hasattr(out, "keys") else out
    return [int(x) for x in ids]


def check_row(tokenizer: Any, row: DatasetRow) -> str:
    """The round-trip verdict of one row (a reason constant above)."""
    call = row.call
    if call is None or not call.inputs or not call.outputs:
        return NO_MESSAGES
    prompt = row.input_ids[: row.prompt_len]
    reply = row.input_ids[row.prompt_len :]
    if _template(tokenizer, call.inputs, True) != prompt:
        return PROMPT_DIFFERS
    full = _template(tokenizer, call.inputs + call.outputs, False)
    if full == row.input_ids:
        return OK
    if full[: len(row.input_ids)] == row.input_ids:
        rest = tokenizer.decode(full[len(row.input_ids) :], skip_special_tokens=False)
        if not rest.strip():
            return OK_TRAILING
    eot = tokenizer.eos_token_id
    if eot is not None and eot not in reply and eot in full[len(prompt) :]:
        return CUT
    text = tokenizer.decode(reply, skip_special_tokens=False)
    if tokenizer(text, add_special_tokens=False)["input_ids"] != reply:
        return NOT_CANONICAL
    return REPLY_DIFFERS
