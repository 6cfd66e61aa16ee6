"""A judge's rubric: a local text file with a few named slots, and the scale its score is written on.

The rubric is user input, so it is not a template language: the only thing it can do is name
one of the slots below in braces; everything else (other braces included) is kept as written,
and a slot's value is never looked at again (a conversation that says ``{task}`` stays so).

- ``{task}``: the rollout's input, as JSON;
- ``{conversation}``: its last call's messages, one ``ROLE: text`` block each;
- ``{answer}``: its final answer;
- ``{candidates}`` and ``{index}`` (``--group``): every answer of the task's rollouts, numbered
  ``Candidate 1:`` ..., and the number of the one being scored.

The rubric ends where the judge writes its score (``... Score (1-5):``); the scale is the
integers of ``--scale LO-HI`` (single digits, so each is one token: ``1-5``, ``0-9``).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracebank.rescore.errors import RescoreUsageError

SLOTS = ("task", "conversation", "answer", "candidates", "index")
_SLOT = re.compile(r"\{(" + "|".join(SLOTS) + r")\}")
#: A rubric is a prompt, not a document: a larger file is a mistake (or hostile).
MAX_RUBRIC_BYTES = 256 * 1024


@dataclass(frozen=True)
class Rubric:
    """The rubric's text and its sha256 (recorded in the layer manifest)."""

    text: str
    sha256: str

    @property
    def slots(self) -> set[str]:
        return set(_SLOT.findall(self.text))

    def render(self, values: dict[str, str]) -> str:
        """The rubric with each slot it names replaced by ``values[slot]`` (in one pass)."""
        return _SLOT.sub(lambda m: values.get(m.group(1), ""), self.text)


def read_rubric(path: str) -> Rubric:
    """The rubric file at ``path`` (a local UTF-8 text file)."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise RescoreUsageError(f"rubric file {file} does not exist", "--rubric path/to/rubric.txt")
    data = file.read_bytes()
    if len(data) > MAX_RUBRIC_BYTES:
        raise RescoreUsageError(f"rubric file {file} is over {MAX_RUBRIC_BYTES // 1024} KiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise RescoreUsageError(f"rubric file {file} is not UTF-8 text") from None
    if not _SLOT.search(text):
        raise RescoreUsageError(
            f"rubric file {file} names none of {', '.join('{' + s + '}' for s in SLOTS)}",
            "put {conversation} or {answer} where the judge should read the rollout",
        )
    return Rubric(text, hashlib.sha256(data).hexdigest())


def parse_scale(scale: str) -> list[int]:
    """The integers of ``LO-HI`` (single digits, LO < HI)."""
    match = re.fullmatch(r"(\d)-(\d)", scale.strip())
    if not match or int(match.group(1)) >= int(match.group(2)):
        raise RescoreUsageError(
            f"--scale must be LO-HI with single digits LO < HI, got {scale!r}", "for example --scale 1-5"
        )
    return list(range(int(match.group(1)), int(match.group(2)) + 1))


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts: keep the text ones
        return "".join(
            p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return "" if content is None else json.dumps(content, sort_keys=True)


def conversation_text(messages: list[dict[str, Any]]) -> str:
    """``ROLE: text`` blocks, tool calls as their JSON."""
    blocks = []
    for m in messages:
        text = _text(m.get("content"))
        if m.get("tool_calls"):
            text += ("\n" if text else "") + json.dumps(m["tool_calls"], sort_keys=True)
        blocks.append(f"{str(m.get('role', '')).upper()}: {text}")
    return "\n\n".join(blocks)


def candidates_text(answers: list[str | None]) -> str:
    """``Candidate 1:`` ... blocks of a group's answers (``(no answer)`` where there was none)."""
    return "\n\n".join(
        f"Candidate {i}:\n{a if a is not None else '(no answer)'}" for i, a in enumerate(answers, 1)
    )
