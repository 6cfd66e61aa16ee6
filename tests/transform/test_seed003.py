"""Issue 29's done-means for the second seed: seed 003's ``data/train.jsonl`` / ``data/valid.jsonl``
(``messages`` with ``tool_calls`` and tool results, a ``tools`` column) go in with one command, come out
(a scorer's reward layer rewarding every conversation, since the files carry no reward)
as a version whose rows are exactly transformers' ``apply_chat_template(messages, tools=tools)`` of the
file's rows (labels: exactly ``return_assistant_tokens_mask``), and train.

The files are written as seed 003's ``trajectories-to-sft.py`` writes them: tool schemas whose keys are in
no sorted order (the template renders ``tool | tojson``, so a reordered schema would be another prompt),
an assistant turn with ``content`` null and its calls' ``arguments`` as JSON text, tool results answering
them by ``tool_call_id``. Every step is the CLI a user types."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from tracebank.warehouse.contract import IGNORE_INDEX

import tracebank
from tests.fixtures.datasets import load_tokenizer
from tests.fixtures.text_calls import GENERATION_TOOL_TEMPLATE
from tracebank.cli.main import cli

SYSTEM = {"role": "system", "content": "You are a careful shell agent."}

#: Two tools as a file has them: neither a tool's nor a schema's keys in sorted order.
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run_shell",
            "description": "Run a shell command",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}, "cwd": {"type": "string"}},
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "max_bytes": {"type": "integer"}},
                "required": ["path"],
            },
        },
    },
]


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def conversation(task: str, steps: list[tuple[str, dict[str, Any], str]], answer: str) -> dict[str, Any]:
    """One line of seed 003's files: a task, one assistant turn (and its tool result) per step, an answer."""
    messages: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": task}]
    for i, (name, arguments, result) in enumerate(steps):
        call_id = f"call_{i}"
        ask = {"role": "assistant", "content": None, "tool_calls": [_call(call_id, name, arguments)]}
        messages.append(ask)
        messages.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": result})
    messages.append({"role": "assistant", "content": answer})
    return {"messages": messages, "tools": TOOLS}


TRAIN = [
    conversation(
        "How many lines has notes.txt?",
        [("run_shell", {"command": "wc -l notes.txt", "cwd": "/tmp"}, "3 notes.txt")],
        "notes.txt has 3 lines.",
    ),
    conversation(
        "What does config.yaml set the port to?",
        [("read_file", {"path": "config.yaml", "max_bytes": 200}, "port: 8080\nhost: local")],
        "The port is 8080.",
    ),
    conversation(
        "Is there a TODO in main.py?",
        [
            ("run_shell", {"command": "grep -n TODO main.py"}, "12: # TODO fix"),
            ("read_file", {"path": "main.py", "max_bytes": 100}, "import os\n# TODO fix"),
        ],
        "Yes, on line 12.",
    ),
]
VALID = [
    conversation(
        "List the folder.",
        [("run_shell", {"command": "ls", "cwd": "."}, "a.txt b.txt")],
        "Two files: a.txt and b.txt.",
    ),
]


def write_seed_files(data: Path) -> None:
    data.mkdir()
    for name, rows in (("train.jsonl", TRAIN), ("valid.jsonl", VALID)):
        (data / name).write_text("".join(json.dumps(row) + "\n" for row in rows))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """A tiny random Qwen3 whose tool-aware tokenizer's template marks the assistant's tokens."""
    from tracebank.train.tiny_model import build_tiny_qwen3_model

    folder = build_tiny_qwen3_model(tmp_path_factory.mktemp("seed003-model"), seed=0)
    tokenizer = load_tokenizer(folder)
    tokenizer.chat_template = GENERATION_TOOL_TEMPLATE
    tokenizer.save_pretrained(str(folder))
    return folder


def oracle(tokenizer, row: dict[str, Any]) -> tuple[list[int], list[int]]:
    """transformers on the file's row as written: ids, and labels keeping exactly its assistant mask."""
    marks = {"return_dict": True, "return_assistant_tokens_mask": True}
    out = tokenizer.apply_chat_template(row["messages"], tools=row["tools"], tokenize=True, **marks)
    ids = list(out["input_ids"])
    return ids, [t if m else IGNORE_INDEX for t, m in zip(ids, out["assistant_masks"], strict=True)]


def invoke(wh, *args: str) -> str:
    out = CliRunner().invoke(cli, ["--warehouse", str(wh.root), *args])
    assert out.exit_code == 0, out.output
    return out.stdout


def test_seed_003s_files_go_in_come_out_as_the_oracle_and_train(wh, tmp_path, model_dir):
    data = tmp_path / "data"
    write_seed_files(data)
    collected = invoke(wh, "collect", str(data))
    assert f" from chat:{data}: 4 new rollouts, 9 events" in collected
    assert "silver: 9 llm calls (0 with token ids, 9 text only)" in collected

    # seed 003's files carry no reward: a scorer gives every conversation one (issue 29's point 5)
    scorer = tmp_path / "sft_scorer.py"
    scorer.write_text("def every_conversation(rollout):\n    return 1.0\n")
    invoke(wh, "rescore", "--scorer", f"{scorer}:every_conversation", "--name", "sft", "--quiet")
    made = invoke(wh, "transform", "--dataset", "agent", "--rewards", "sft", "--tokenizer", str(model_dir))
    assert made.startswith("wrote agent@v1: 4 rows")
    dataset = tracebank.open(wh.root).dataset("agent@v1")
    rows = [row for path in dataset.files() for row in pq.read_table(path).to_pylist()]
    tokenizer = load_tokenizer(model_dir)
    expected = [oracle(tokenizer, row) for row in TRAIN + VALID]
    assert sorted((row["input_ids"], row["labels"]) for row in rows) == sorted(expected)
    # the tool section is the schemas as written; what is trained is the calls and answers only
    for source, (ids, labels) in zip(TRAIN + VALID, expected, strict=True):
        assert all(json.dumps(tool) in tokenizer.decode(ids) for tool in TOOLS)
        trained = tokenizer.decode([t for t in labels if t != IGNORE_INDEX])
        said = [m["content"] for m in source["messages"] if m["role"] != "assistant"]
        assert "<tool_call>" in trained and source["messages"][-1]["content"] in trained
        assert not any(text in trained for text in said)
    assert dataset.counts["text"]["template_drops"] == {"tools": 0, "tool_calls": 0, "first_example": None}

    model, out = ["--base-model", str(model_dir)], ["--output", str(tmp_path / "run")]
    steps = ["--max-steps", "2", "--batch-size", "2", "--grad-accum", "1", "--warmup-steps", "0"]
    trained = invoke(wh, "train", "--quiet", "--dataset", "agent", *model, *out, *steps, "--save", "lora")
    assert re.fullmatch(
        r"run \S+ succeeded: loss \d+\.\d{4} -> \d+\.\d{4}, .*2 steps, .*", trained.strip()
    ), trained
    assert (tmp_path / "run" / "adapter_config.json").exists()
