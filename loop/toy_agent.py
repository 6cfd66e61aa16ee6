"""The demo's agent: repeat a short text, rewarded by how similar the answer is.

A task is ``{"task_id": ..., "text": "..."}``. The agent asks the model to repeat
the text, and when the answer is not close enough it asks once more with the
first answer in the conversation (so rollouts have one or two chat calls). The
reward is a real score of the final answer: ``difflib``'s similarity ratio
with the text, in [0, 1]; a sampled answer of a random tiny model scores
differently every time, so keeping the best rows is a real selection.

When ``$TRACEBANK_TOY_AGENT_LOG`` names a file, every rollout appends one JSON
line there: its id, each call's messages and answer, and the reward. Tests
compare that record of what the agent exchanged with what the warehouse holds.
"""

from __future__ import annotations

import difflib
import json
import os
import random
from typing import Any

LOG_ENV = "TRACEBANK_TOY_AGENT_LOG"
SYSTEM = "Repeat the user's text exactly."
WORDS = (
    "the",
    "cat",
    "sat",
    "on",
    "a",
    "mat",
    "red",
    "fox",
    "runs",
    "far",
    "blue",
    "sky",
    "is",
    "big",
    "one",
    "two",
    "sun",
    "day",
    "we",
    "go",
)
#: Answers at least this similar end the rollout after the first call.
GOOD_ENOUGH = 0.5
MAX_TOKENS = 12


def make_tasks(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` toy tasks: short texts of 3 to 5 words, the same for the same seed."""
    rng = random.Random(seed)
    return [
        {"task_id": f"repeat-{i:03d}", "text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 5)))}
        for i in range(n)
    ]


def similarity(answer: str, text: str) -> float:
    """How close ``answer`` is to ``text``, in [0, 1] (1 = identical after trimming spaces)."""
    return difflib.SequenceMatcher(None, answer.strip(), text.strip()).ratio()


def repeat_text(task: dict[str, Any], llm: Any, rollout: Any = None) -> float:
    """The rollout: one or two chat calls through the proxy, returning the final answer's similarity."""
    from openai import OpenAI

    client = OpenAI(base_url=llm.endpoint, api_key=llm.api_key or "unused", max_retries=0, timeout=60)
    temperature = float((llm.sampling_parameters or {}).get("temperature", 1.0))
    messages: list[dict[str, str]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": task["text"]},
    ]
    calls: list[dict[str, Any]] = []
    reward = 0.0
    for turn in range(2):
        sent = [dict(m) for m in messages]
        resp = client.chat.completions.create(
            model=llm.model,
            messages=sent,  # type: ignore[arg-type]
            max_tokens=MAX_TOKENS,
            temperature=temperature,
        )
        answer = resp.choices[0].message.content or ""
        calls.append(
            {
                "messages": sent,
                "answer": answer,
                "response_id": resp.id,
                "finish_reason": resp.choices[0].finish_reason,
            }
        )
        reward = similarity(answer, task["text"])
        if reward >= GOOD_ENOUGH or turn == 1:
            break
        messages += [
            {"role": "assistant", "content": answer},
            {"role": "user", "content": f"Not quite. Repeat exactly: {task['text']}"},
        ]
    _log(
        {
            "rollout_id": getattr(rollout, "rollout_id", None),
            "task_id": task.get("task_id"),
            "calls": calls,
            "reward": reward,
        }
    )
    return reward


def _log(record: dict[str, Any]) -> None:
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    # One write per line with O_APPEND: lines of concurrent runner processes do not interleave.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


def read_log(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records ``repeat_text`` appended to ``path``."""
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def toy_agent() -> Any:
    """``repeat_text`` as an agentlightning LitAgent (imports agentlightning)."""
    import agentlightning as agl

    return agl.rollout(repeat_text)
