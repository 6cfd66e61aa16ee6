"""``transform --tokenizer`` over vLLM-served calls logged with their ids (issue 29, point 8's second
oracle): the rows are vLLM's ids exactly, and the request messages retokenized with the chat template
are compared with them (``counts.text.retokenization``). The calls are the real vLLM 0.32.0 responses
of ``tests/serve/fixtures/vllm_responses.json``; the tokenizer is the one of the model they were
recorded from (``build_tiny_qwen3_model``, seed 0: its weights' sha256 is checked against the fixture)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from tracebank.transform import TransformConfig, transform

import tracebank
from tests.serve import vllm_parity as parity

VLLM = parity.load_fixture()
#: The recorded non-streamed requests that asked for ``return_token_ids`` and have no tools.
PLAIN = ["plain_token_ids", "length_stop"]
WITH_TOOLS = ["tool_call", "tool_history"]


@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory) -> Path:
    return parity.recorded_model(tmp_path_factory.mktemp("qwen3"))


def body(name: str) -> dict:
    return json.loads(json.dumps(VLLM["responses"][name]["body"]))


def collect_log(wh, path: Path, names: list[str], bodies: dict[str, dict] | None = None) -> None:
    """The requests and (recorded, or given) responses as an OpenAI log, each line rewarded, collected."""
    bodies = bodies or {}
    lines = [
        {"request": VLLM["requests"][n], "response": bodies.get(n, body(n)), "reward": 1.0, "id": n}
        for n in names
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    tracebank.open(str(wh.root)).collect(str(path), format="openai")


def engine_ids(response: dict) -> list[int]:
    return response["prompt_token_ids"] + response["choices"][0]["token_ids"]


def rows_of(result) -> list[dict]:
    return [
        row for f in result.manifest["files"] for row in pq.read_table(result.folder / f["path"]).to_pylist()
    ]


def retokenization(result) -> dict:
    return result.manifest["counts"]["text"]["retokenization"]


def test_vllm_ids_are_the_rows_and_their_messages_retokenize_equal(wh, tmp_path, qwen3_dir):
    collect_log(wh, tmp_path / "vllm.jsonl", PLAIN)
    result = transform(wh, TransformConfig(name="served", tokenizer=str(qwen3_dir)))
    assert sorted(r["input_ids"] for r in rows_of(result)) == sorted(engine_ids(body(n)) for n in PLAIN)
    assert retokenization(result) == {
        "compared": 2,
        "equal": 2,
        "differ": 0,
        "no_messages": 0,
        "failed": 0,
        "first_diff": None,
        "first_failure": None,
    }
    assert result.manifest["counts"]["token_source"] == {"engine": 2, "text": 0}
    assert "retokenize" not in result.summary()
    # the oracle beside the count: transformers renders the request as vLLM did
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(qwen3_dir))
    for name in PLAIN:
        messages = VLLM["requests"][name]["messages"]
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        assert list(ids["input_ids"]) == body(name)["prompt_token_ids"]


def test_altered_engine_ids_are_kept_and_their_first_difference_named(wh, tmp_path, qwen3_dir):
    altered = body("length_stop")
    recorded = altered["prompt_token_ids"][5]
    altered["prompt_token_ids"][5] = recorded + 1  # as if the server had rendered another text there
    collect_log(wh, tmp_path / "vllm.jsonl", PLAIN, {"length_stop": altered})
    result = transform(wh, TransformConfig(name="served", tokenizer=str(qwen3_dir)))
    rows = sorted(r["input_ids"] for r in rows_of(result))
    assert rows == sorted([engine_ids(body("plain_token_ids")), engine_ids(altered)])  # not the retokenized
    retok = retokenization(result)
    assert (retok["compared"], retok["equal"], retok["differ"]) == (2, 1, 1)
    first = retok["first_diff"]
    assert (first["position"], first["engine_token"]) == (5, recorded + 1)
    assert first["retokenized_token"] == recorded
    changed = [r["rollout_id"] for r in rows_of(result) if r["input_ids"] == engine_ids(altered)]
    assert first["rollout_id"] == changed[0]
    assert (
        f"1 of 2 engine calls retokenize to other ids than the engine's (first: rollout {changed[0]} at "
        "token 5; rows keep the engine's ids" in result.summary()
    )


def test_engine_ids_shorter_than_the_retokenization_differ_where_they_end(wh, tmp_path, qwen3_dir):
    cut = body("plain_token_ids")
    full = list(cut["prompt_token_ids"])
    cut["prompt_token_ids"] = full[:-3]  # e.g. a server that left out the generation prompt
    collect_log(wh, tmp_path / "vllm.jsonl", ["plain_token_ids"], {"plain_token_ids": cut})
    result = transform(wh, TransformConfig(name="served", tokenizer=str(qwen3_dir)))
    first = retokenization(result)["first_diff"]
    assert (first["position"], first["engine_token"], first["retokenized_token"]) == (
        len(full) - 3,
        None,
        full[-3],
    )
    assert [r["input_ids"] for r in rows_of(result)] == [engine_ids(cut)]


def test_tool_calls_served_by_vllm_retokenize_to_its_very_ids(wh, tmp_path, qwen3_dir):
    """vLLM rendered the request's tools in their key order; the warehouse keeps an event's keys in the
    order recorded, so the template's ``tojson`` renders the same text and the ids are equal. Were the
    keys sorted (as the archive once stored them), the rendering would differ inside ``<tools>``."""
    from transformers import AutoTokenizer

    collect_log(wh, tmp_path / "vllm.jsonl", WITH_TOOLS)
    result = transform(wh, TransformConfig(name="tools", tokenizer=str(qwen3_dir)))
    assert sorted(r["input_ids"] for r in rows_of(result)) == sorted(engine_ids(body(n)) for n in WITH_TOOLS)
    retok = retokenization(result)
    assert (retok["compared"], retok["equal"], retok["differ"]) == (2, 2, 0)
    tokenizer = AutoTokenizer.from_pretrained(str(qwen3_dir))
    engine = body("tool_call")["prompt_token_ids"]
    sorted_tools = json.loads(json.dumps(parity.TOOLS, sort_keys=True))
    resorted = tokenizer.apply_chat_template(
        parity.MESSAGES, tools=sorted_tools, add_generation_prompt=True, tokenize=True
    )["input_ids"]
    assert resorted != engine  # the check would catch a sorted archive


def test_without_tokenizer_nothing_changes(wh, tmp_path, qwen3_dir):
    collect_log(wh, tmp_path / "vllm.jsonl", PLAIN)
    plain = transform(wh, TransformConfig(name="plain"))
    with_tokenizer = transform(wh, TransformConfig(name="retok", tokenizer=str(qwen3_dir)))
    assert "text" not in plain.manifest["counts"] and "tokenizer" not in plain.manifest["params"]
    assert rows_of(plain) == rows_of(with_tokenizer)
    params = {**with_tokenizer.manifest["params"], "name": "plain"}
    del params["tokenizer"]
    assert {k: v for k, v in params.items() if k != "per_turn"} == {
        k: v for k, v in plain.manifest["params"].items() if k != "per_turn"
    }
