"""transform.text_render: a batch of conversations renders to exactly what transformers'
``apply_chat_template(..., return_assistant_tokens_mask=True)`` gives each one alone."""

from __future__ import annotations

import random

import numpy as np
import pytest
from tracebank.transform.text_render import ChatRenderer

from tests.fixtures.text_calls import (
    DROPPING_TEMPLATE,
    TOOLS,
    build_chat_tokenizer,
    conversation_messages,
    tool_conversation,
)

WORDS = ["sunny", "Paris", " ", "  ", "\n", "\t", "é", "日本", "🙂", "<|im_end|>", "{}", "get_weather", ""]


@pytest.fixture(scope="module")
def renderer(tmp_path_factory):
    return ChatRenderer.load(str(build_chat_tokenizer(tmp_path_factory.mktemp("render-tokenizer"))))


def text(rng: random.Random) -> str:
    return "".join(rng.choice(WORDS) for _ in range(rng.randint(0, 12)))


def random_conversation(rng: random.Random) -> list[dict]:
    """System, user, then 0-3 tool rounds and an answer; contents with spaces, newlines, special
    tokens, non-ASCII and empty strings (where a token boundary and a span boundary disagree)."""
    messages: list[dict] = [{"role": "system", "content": text(rng)}, {"role": "user", "content": text(rng)}]
    for k in range(rng.randint(0, 3)):
        function = {"name": "get_weather", "arguments": text(rng)}
        call = {"id": f"c{k}", "type": "function", "function": function}
        messages.append({"role": "assistant", "content": rng.choice([None, text(rng)]), "tool_calls": [call]})
        messages.append({"role": "tool", "content": text(rng), "tool_call_id": f"c{k}"})
    messages.append({"role": "assistant", "content": text(rng)})
    return messages


def one_at_a_time(tokenizer, messages, tools, answer_only: bool) -> tuple[list[int], list[bool]]:
    """What rendering did per conversation before batching: transformers' own call, and with
    ``answer_only`` the prompt's common prefix untrained."""
    out = tokenizer.apply_chat_template(
        messages, tools=tools or None, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    ids, mask = list(out["input_ids"]), [bool(m) for m in out["assistant_masks"]]
    if answer_only:
        prompt = tokenizer.apply_chat_template(
            messages[:-1], tools=tools or None, tokenize=True, return_dict=True, add_generation_prompt=True
        )["input_ids"]
        same = next((i for i, (a, b) in enumerate(zip(ids, prompt, strict=False)) if a != b), None)
        mask[: min(len(ids), len(prompt)) if same is None else same] = [False] * (
            min(len(ids), len(prompt)) if same is None else same
        )
    return ids, mask


@pytest.mark.parametrize("answer_only", [False, True])
def test_a_batch_is_identical_to_apply_chat_template_per_conversation(renderer, answer_only):
    rng = random.Random(29)
    batch = [(random_conversation(rng), rng.choice([TOOLS, None, []]), f"r{i}") for i in range(300)]
    rendered = renderer.render_many(batch, answer_only=answer_only)
    assert len(rendered) == len(batch)
    trained = 0
    for (messages, tools, _), got in zip(batch, rendered, strict=True):
        assert not isinstance(got, Exception)
        ids, mask = one_at_a_time(renderer.tokenizer, messages, tools, answer_only)
        assert got.ids.tolist() == ids
        assert got.trained.tolist() == mask
        trained += int(got.trained.sum())
    assert trained > 0  # the masks are not all empty
    assert not renderer.drops.any()


def test_a_failing_conversation_fails_alone_in_its_batch(renderer):
    rng = random.Random(3)
    good = [(random_conversation(rng), TOOLS, f"r{i}") for i in range(3)]
    ask = {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": 5, "arguments": []}}, 7]}
    hostile = ([{"role": "user", "content": "hi"}, ask], TOOLS, "bad")
    got = renderer.render_many([good[0], hostile, good[1], ([], None, "empty"), good[2]], answer_only=False)
    assert [isinstance(g, Exception) for g in got] == [False, True, False, True, False]
    assert "empty conversation" in str(got[3])
    alone = [renderer.render(messages, tools, False, example) for messages, tools, example in good]
    for one, batched in zip(alone, [got[0], got[2], got[4]], strict=True):
        assert np.array_equal(one.ids, batched.ids) and np.array_equal(one.trained, batched.trained)


def test_dropped_tool_and_call_names_are_counted_from_the_rendered_text(tmp_path):
    renderer = ChatRenderer.load(str(build_chat_tokenizer(tmp_path, DROPPING_TEMPLATE)))
    messages = conversation_messages(tool_conversation("r", "Oslo"))
    calls = sum(len(m.get("tool_calls") or []) for m in messages)
    assert calls == 1
    renderer.render_many([(messages, TOOLS, "first"), (messages, TOOLS, "second")], answer_only=False)
    assert renderer.drops.as_dict() == {"tools": 2, "tool_calls": 2 * calls, "first_example": "first"}
