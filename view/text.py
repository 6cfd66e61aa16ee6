"""Conversations as plain terminal text (what `tracebank show` prints)."""

from __future__ import annotations

import json
from collections.abc import Callable

from tracebank.core.text import visible
from tracebank.view.conversation import Call, Conversation, DatasetRow, Message
from tracebank.view.tokens import legend, marked_tokens

RULE = "─"


def _cut(text: str, max_chars: int) -> str:
    if max_chars and len(text) > max_chars:
        return text[:max_chars] + f" … [{len(text) - max_chars:,} more characters]"
    return text


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.split("\n"))


def message_lines(msg: Message, max_chars: int) -> list[str]:
    """A message as ``role: text`` plus one line per tool call."""
    role = msg.role + (f" [{msg.tool_call_id}]" if msg.tool_call_id else "")
    out = []
    if msg.content or not msg.tool_calls:
        text = _cut(msg.content, max_chars)
        first, *rest = text.split("\n")
        out.append(f"  {role}: {first}")
        out += [_indent(line) for line in rest]
    for call in msg.tool_calls:
        fn = call.get("function") or {}
        args = fn.get("arguments")
        args_text = args if isinstance(args, str) else json.dumps(args, sort_keys=True)
        out.append(
            f"  {msg.role} → tool call {fn.get('name')}({_cut(args_text, max_chars)}) [{call.get('id')}]"
        )
    return out


def _fmt_reward(value: float | None) -> str:
    return "none" if value is None else f"{value:g}"


def call_header(index: int, call: Call) -> str:
    parts = [f"call {index}", f"seq {call.sequence_id}"]
    if call.model:
        parts.append(call.model)
    if call.agent is not None:
        parts.append(f"agent {visible(call.agent, keep='')}")  # a newline in it cannot fake a line
    if call.prompt_len is not None:
        parts.append(f"prompt {call.prompt_len} tok")
    if call.response_len is not None:
        parts.append(f"response {call.response_len} tok")
    if call.reject_reason:
        parts.append(f"not usable: {call.reject_reason}")
    return f"{RULE * 2} " + " · ".join(parts)


def _new_inputs(call: Call, previous: Call | None) -> tuple[list[Message], int]:
    """The input messages a reader has not seen yet (a call's prompt usually extends the last)."""
    if previous is None:
        return call.inputs, 0
    seen = previous.inputs + previous.outputs
    if len(call.inputs) >= len(seen) and all(
        (a.role, a.content) == (b.role, b.content) for a, b in zip(call.inputs, seen, strict=False)
    ):
        return call.inputs[len(seen) :], len(seen)
    return call.inputs, 0


def conversation_text(conv: Conversation, max_chars: int = 2000) -> str:
    """A rollout's calls, messages, token counts and rewards in sequence order."""
    head = [
        f"rollout {conv.rollout_id} · attempt {conv.attempt_id}"
        + (f" · collection {conv.collection_id}" if conv.collection_id else "")
        + f" · final reward {_fmt_reward(conv.final_reward)}"
    ]
    if conv.task:
        head.append(f"task: {_cut(conv.task, max_chars)}")
    events: list[tuple[int, int, list[str]]] = []
    previous: Call | None = None
    for i, call in enumerate(conv.calls, 1):
        lines = [call_header(i, call)]
        if call.tools and (previous is None or previous.tools != call.tools):
            names = ", ".join(str((t.get("function") or {}).get("name")) for t in call.tools)
            lines.append(f"  tools: {names}")
        fresh, skipped = _new_inputs(call, previous)
        if skipped:
            lines.append(f"  (… {skipped} earlier messages, as above)")
        for m in fresh:
            lines += message_lines(m, max_chars)
        for m in call.outputs:
            lines += message_lines(m, max_chars)
        if not call.inputs and not call.outputs:
            lines.append("  (no messages recorded for this call)")
        events.append((call.sequence_id, 0, lines))
        previous = call
    for r in conv.rewards:
        events.append(
            (
                r.sequence_id,
                1,
                [
                    f"{RULE * 2} reward {r.value:g}"
                    + (f" ({r.name})" if r.name else "")
                    + f" · seq {r.sequence_id}"
                ],
            )
        )
    body = [line for _, _, lines in sorted(events, key=lambda e: (e[0], e[1])) for line in lines]
    if not conv.calls:
        body.append("(no LLM calls recorded for this attempt)")
    return "\n".join(head + body)


def dataset_row_text(
    row: DatasetRow, max_chars: int = 2000, decode: Callable[[list[int]], str] | None = None
) -> str:
    """A dataset row: where it came from, its call's messages, and (with a tokenizer) its trained tokens."""
    lines = [
        f"{row.dataset}@v{row.version} row {row.index} ({row.split}) · reward {_fmt_reward(row.reward)} · "
        f"{len(row.input_ids)} tokens: {row.prompt_len} prompt, {row.trained} trained",
        f"from rollout {row.rollout_id} · attempt {row.attempt_id} · span {row.span_id}",
    ]
    if row.call is None:
        lines.append("(its call is not in llm_calls: the silver tables of its collection are missing)")
    else:
        lines.append(call_header(1, row.call))
        for m in row.call.inputs + row.call.outputs:
            lines += message_lines(m, max_chars)
    if decode is not None:
        lines.append(f"{RULE * 2} tokens ({legend()})")
        lines.append(_indent(_cut(marked_tokens(row.input_ids, row.labels, decode), max_chars * 4), "  "))
    return "\n".join(lines)
