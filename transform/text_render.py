"""A chat conversation to token ids and an assistant mask, through a tokenizer's own chat template.

``--tokenizer MODEL`` names a local folder or a hub id already in the Hugging Face cache
(``core.hub``, as ``train --base-model``); nothing is downloaded and no remote code runs
(``trust_remote_code=False``). The template is Jinja from the tokenizer's files: transformers
renders it in its immutable sandboxed Jinja environment, so a template can compute text but not
reach Python objects or files. Labels come from transformers' ``return_assistant_tokens_mask``,
which needs ``{% generation %}`` markers in the template; a template without them is refused when
a text call is to be rendered (it would train nothing), but can still retokenize the prompts of
engine calls (``transform.retokenize``), which needs no mask.

Each rendering is checked against what the data has (the seed trainer's ``--inspect-only`` idea):
every offered tool's name and every assistant tool call's name must appear in the rendered text,
else the template dropped it and the version counts it (:class:`TemplateDrops`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tracebank.core.hub import resolve_pretrained
from tracebank.transform.errors import TransformUsageError

#: The files that decide how a tokenizer splits and renders text (hashed into the manifest).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
)
_GENERATION = re.compile(r"\{%-?\s*generation\s*-?%\}")


@dataclass
class TemplateDrops:
    """Renderings that lost what the data has: rows whose text lacks an offered tool's name, tool
    calls whose name is missing, and the rollout of the first such row."""

    tools: int = 0
    tool_calls: int = 0
    first_example: str | None = None

    def any(self) -> bool:
        return bool(self.tools or self.tool_calls)

    def as_dict(self) -> dict[str, Any]:
        return {"tools": self.tools, "tool_calls": self.tool_calls, "first_example": self.first_example}


@dataclass(frozen=True)
class Rendered:
    """One conversation's ids and which of them are trained (the assistant's)."""

    ids: np.ndarray
    trained: np.ndarray
    """bool, one per id."""


@dataclass
class ChatRenderer:
    """A loaded tokenizer and what the manifest records of it."""

    tokenizer: Any
    info: dict[str, Any]
    drops: TemplateDrops = field(default_factory=TemplateDrops)
    marked: bool = True
    """Whether the chat template has ``{% generation %}`` markers (rendering text calls needs them)."""

    @classmethod
    def load(cls, name: str) -> ChatRenderer:
        """The tokenizer of ``name`` (a folder or a cached hub id); TransformUsageError in one line
        when it is missing, unreadable, or has no chat template."""
        found = resolve_pretrained(name, "tokenizer", TransformUsageError)
        from transformers import AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(
                str(found.path), local_files_only=True, trust_remote_code=False
            )
        except (OSError, ValueError, TypeError, KeyError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise TransformUsageError(
                f"cannot load a tokenizer from {name}: {first}", "pass a model folder or a cached hub id"
            ) from exc
        template = tokenizer.chat_template
        if isinstance(template, dict):  # named templates: the default one renders chats
            template = template.get("default")
        if not isinstance(template, str) or not template:
            raise TransformUsageError(f"the tokenizer of {name} has no chat template")
        info = {
            "name": name,
            "revision": found.revision,
            "files_sha256": files_sha256(found.path),
            "chat_template_sha256": hashlib.sha256(template.encode()).hexdigest(),
        }
        return cls(tokenizer, info, marked=bool(_GENERATION.search(template)))

    def require_marks(self) -> None:
        """TransformUsageError when the template cannot tell the assistant's tokens apart."""
        if not self.marked:
            raise TransformUsageError(
                f"the chat template of {self.info['name']} has no {{% generation %}} markers, so the "
                "assistant's tokens cannot be told apart",
                "add {% generation %}...{% endgeneration %} around the assistant turns of its template",
            )

    def prompt(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> np.ndarray:
        """The ids of ``messages`` rendered as a prompt (``add_generation_prompt=True``), as a server
        renders a chat request; exceptions of the template propagate."""
        out = self.tokenizer.apply_chat_template(
            messages, tools=tools or None, tokenize=True, return_dict=True, add_generation_prompt=True
        )
        return np.asarray(out["input_ids"], dtype=np.int64)

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        answer_only: bool,
        example: str,
    ) -> Rendered:
        """``messages`` (the last one the answer) rendered with ``tools``; trained: every assistant
        token, or with ``answer_only`` those after the prompt (the last message's). Exceptions of
        the template (hostile records, a template's own ``raise_exception``) propagate."""
        (out,) = self.render_many([(messages, tools, example)], answer_only)
        if isinstance(out, Exception):
            raise out
        return out

    def render_many(
        self,
        conversations: Sequence[tuple[list[dict[str, Any]], list[dict[str, Any]] | None, str]],
        answer_only: bool,
    ) -> list[Rendered | Exception]:
        """:meth:`render` of each (messages, tools, example), in order: its rows, or the exception
        its template raised. The same ids and mask as ``apply_chat_template(...,
        return_assistant_tokens_mask=True)`` (what it does, with one batch encode for all texts)."""
        results: list[Rendered | Exception | None] = [None] * len(conversations)
        texts, spans, prompts, live = [], [], [], []
        for k, (messages, tools, _) in enumerate(conversations):
            try:
                text, generation = self._text(messages, tools, mask=True)
                prompt = self._text(messages[:-1], tools, mask=False)[0] if answer_only else ""
            except Exception as exc:  # noqa: BLE001  the template is code run over hostile records
                results[k] = exc
                continue
            texts.append(text)
            spans.append(generation)
            prompts.append(prompt)
            live.append(k)
        if not live:
            return [r for r in results if r is not None]
        encoded = self._encode(texts)
        prompt_ids = self._encode(prompts).input_ids if answer_only else []
        for j, k in enumerate(live):
            messages, tools, example = conversations[k]
            ids = np.asarray(encoded.input_ids[j], dtype=np.int32)
            trained = _assistant_mask(encoded.encodings[j], spans[j], len(ids))
            if answer_only:
                trained[: _common_prefix(ids, np.asarray(prompt_ids[j], dtype=np.int32))] = False
            self._check(texts[j], messages, tools, example)
            results[k] = Rendered(ids, trained)
        return [r for r in results if r is not None]

    def _text(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, mask: bool
    ) -> tuple[str, list[tuple[int, int]]]:
        """The template's text of ``messages`` and its generation spans (characters), as
        ``apply_chat_template`` renders it: the answer (``mask``) or the prompt before it."""
        from transformers.utils.chat_template_utils import render_jinja_template

        if not messages:
            raise ValueError(
                "Cannot apply chat template to an empty conversation. Provide at least one message."
            )
        tools = tools or None
        render: Any = render_jinja_template  # annotated as returning str: it returns (texts, spans)
        texts, generation = render(
            conversations=[messages],
            tools=tools,
            documents=None,
            chat_template=self.tokenizer.get_chat_template(None, tools),
            return_assistant_tokens_mask=mask,
            continue_final_message=False,
            add_generation_prompt=not mask,
            **self.tokenizer.special_tokens_map,
        )
        return texts[0], generation[0] if mask else []

    def _encode(self, texts: list[str]) -> Any:
        """One batch encode, with the arguments ``apply_chat_template`` tokenizes its text with."""
        return self.tokenizer(
            texts,
            padding=False,
            truncation=False,
            max_length=None,
            add_special_tokens=False,
            return_tensors=None,
        )

    def _check(
        self,
        text: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        example: str,
    ) -> None:
        tools_lost = any(name not in text for name in tool_names(tools or []))
        calls_lost = sum(
            name not in text
            for message in messages
            if message.get("role") == "assistant"
            for name in call_names(message.get("tool_calls"))
        )
        if tools_lost or calls_lost:
            self.drops.tools += int(tools_lost)
            self.drops.tool_calls += calls_lost
            self.drops.first_example = self.drops.first_example or example


def _assistant_mask(encoding: Any, spans: list[tuple[int, int]], n: int) -> np.ndarray:
    """Which of ``n`` tokens the generation ``spans`` cover, as ``apply_chat_template`` maps them
    (its quirks kept: a span whose start maps to no token ends the walk; one whose end maps to no
    token, or to token 0, runs to the end)."""
    mask = np.zeros(n, dtype=bool)
    for start_char, end_char in spans:
        start = encoding.char_to_token(start_char, 0)
        end = encoding.char_to_token(end_char - 1, 0)
        if start is None:
            break
        mask[start : end + 1 if end else n] = True
    return mask


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    differs = np.flatnonzero(a[:n] != b[:n])
    return int(differs[0]) if len(differs) else n


def tool_names(tools: list[Any]) -> list[str]:
    """The function names of OpenAI-format tool definitions (entries of another shape are skipped)."""
    out = []
    for tool in tools:
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str) and fn["name"]:
            out.append(fn["name"])
    return out


def call_names(tool_calls: Any) -> list[str]:
    """The function names of an assistant message's OpenAI-format tool calls."""
    if not isinstance(tool_calls, list):
        return []
    return tool_names([c for c in tool_calls if isinstance(c, dict) and isinstance(c.get("function"), dict)])


def files_sha256(folder: Path) -> str:
    """sha256 over the tokenizer files present in ``folder`` (each file's name and sha256, sorted)."""
    lines = []
    for name in TOKENIZER_FILES:
        path = folder / name
        if path.is_file():
            lines.append(f"{name} {hashlib.sha256(path.read_bytes()).hexdigest()}\n")
    return hashlib.sha256("".join(sorted(lines)).encode()).hexdigest()


def parse_json_list(text: str | None) -> list[Any] | None:
    """A silver JSON column (tool_calls, tools) as a list; None when absent or not a list."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, list) else None
