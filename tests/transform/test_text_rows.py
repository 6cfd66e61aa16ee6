"""``transform --tokenizer``: calls recorded without token ids become rows through the tokenizer's chat
template. Oracle: transformers' own ``apply_chat_template`` on the same messages and tools (ids) and its
``return_assistant_tokens_mask`` (labels), with a real tiny tokenizer built here."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from tracebank.collect.conversation import Call
from tracebank.transform import TransformConfig, transform
from tracebank.transform.errors import EmptyDatasetError, TransformUsageError
from tracebank.warehouse.contract import IGNORE_INDEX

from tests.fixtures.datasets import load_tokenizer
from tests.fixtures.preference import commit_agl1, plan
from tests.fixtures.text_calls import (
    DROPPING_TEMPLATE,
    TOOLS,
    build_chat_tokenizer,
    commit_text,
    conversation_messages,
    tool_conversation,
)
from tracebank.cli.main import cli

CITIES = ["Paris", "Rome", "Oslo"]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    return build_chat_tokenizer(tmp_path_factory.mktemp("chat-tokenizer"))


@pytest.fixture(scope="module")
def tokenizer(tokenizer_dir):
    return load_tokenizer(tokenizer_dir)


def conversations():
    return [tool_conversation(f"chat-{i}", city) for i, city in enumerate(CITIES)]


def rows_of(result) -> list[dict]:
    return [
        row for f in result.manifest["files"] for row in pq.read_table(result.folder / f["path"]).to_pylist()
    ]


def sorted_keys(value):
    """``value`` with every object's keys sorted (what a warehouse that reorders JSON would hand back)."""
    return json.loads(json.dumps(value, sort_keys=True))


def oracle(tokenizer, messages, answer_only: bool) -> tuple[list[int], list[int]]:
    """transformers on the messages and tools exactly as the source has them (no key reordered)."""
    tools = TOOLS
    out = tokenizer.apply_chat_template(
        messages, tools=tools, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    ids, mask = list(out["input_ids"]), list(out["assistant_masks"])
    assert ids == list(tokenizer.apply_chat_template(messages, tools=tools, tokenize=True)["input_ids"])
    if answer_only:  # only the last message (the call's answer): everything its prompt renders is masked
        prompt = tokenizer.apply_chat_template(
            messages[:-1], tools=tools, tokenize=True, add_generation_prompt=True
        )
        assert ids[: len(prompt["input_ids"])] == list(prompt["input_ids"])
        mask = [0] * len(prompt["input_ids"]) + mask[len(prompt["input_ids"]) :]
    return ids, [t if m else IGNORE_INDEX for t, m in zip(ids, mask, strict=True)]


def test_the_oracle_sees_the_tool_schema_in_its_written_key_order(tokenizer):
    """The template renders ``tool | tojson``: sorting the schema's keys renders another prompt, so the
    rows below equal the oracle only if the warehouse kept the order the source wrote."""
    schema = TOOLS[0]["function"]["parameters"]
    assert list(TOOLS[0]) != sorted(TOOLS[0]) and list(schema) != sorted(schema)
    assert list(schema["properties"]) != sorted(schema["properties"])
    messages = conversation_messages(conversations()[0])
    as_written = tokenizer.apply_chat_template(messages, tools=TOOLS, tokenize=False)
    reordered = tokenizer.apply_chat_template(messages, tools=sorted_keys(TOOLS), tokenize=False)
    assert json.dumps(TOOLS[0]) in as_written and as_written != reordered


def test_a_conversation_is_one_row_equal_to_the_chat_template_oracle(wh, tmp_path, tokenizer_dir, tokenizer):
    commit_text(wh, conversations(), tmp_path / "spool")
    result = transform(wh, TransformConfig(name="chat", tokenizer=str(tokenizer_dir)))
    rows = {row["rollout_id"]: row for row in rows_of(result)}
    assert sorted(rows) == [f"chat-{i}" for i in range(len(CITIES))]
    for conversation in conversations():
        ids, labels = oracle(tokenizer, conversation_messages(conversation), answer_only=False)
        row = rows[conversation.rollout_id]
        assert row["input_ids"] == ids
        assert row["labels"] == labels
        assert row["attention_mask"] == [1] * len(ids)
        assert row["reward"] == 1.0
        # both assistant turns (the tool call and the answer) are trained, the tool result is not
        trained = tokenizer.decode([t for t in labels if t != IGNORE_INDEX])
        assert "get_weather" in trained and "sunny in" in trained and "sunny, 21 C" not in trained
    counts = result.manifest["counts"]
    assert counts["token_source"] == {"engine": 0, "text": 3}
    info = counts["text"]["tokenizer"]
    assert (
        info["name"] == str(tokenizer_dir)
        and len(info["files_sha256"]) == len(info["chat_template_sha256"]) == 64
    )
    assert counts["text"]["template_drops"] == {"tools": 0, "tool_calls": 0, "first_example": None}
    assert result.manifest["params"]["tokenizer"] == str(tokenizer_dir)


def test_per_turn_gives_a_row_per_assistant_turn_training_only_its_answer(
    wh, tmp_path, tokenizer_dir, tokenizer
):
    commit_text(wh, conversations(), tmp_path / "spool")
    result = transform(wh, TransformConfig(name="turns", tokenizer=str(tokenizer_dir), per_turn=True))
    rows = {(row["rollout_id"], len(row["input_ids"])): row for row in rows_of(result)}
    assert len(rows) == 2 * len(CITIES)
    for conversation in conversations():
        for call in range(2):
            ids, labels = oracle(tokenizer, conversation_messages(conversation, call), answer_only=True)
            assert rows[(conversation.rollout_id, len(ids))]["input_ids"] == ids
            assert rows[(conversation.rollout_id, len(ids))]["labels"] == labels
    assert result.manifest["counts"]["text"]["per_turn"] is True


def test_text_calls_without_tokenizer_are_refused_in_one_line(wh, tmp_path):
    commit_text(wh, conversations(), tmp_path / "spool")
    with pytest.raises(TransformUsageError, match="pass --tokenizer"):
        transform(wh, TransformConfig(name="chat"))
    out = CliRunner().invoke(cli, ["--warehouse", str(wh.root), "transform", "--dataset", "chat"])
    assert out.exit_code == 2
    assert out.output.strip().splitlines() == [
        "Error: 6 calls have no token ids (text-only conversations): pass --tokenizer MODEL to render them "
        "with its chat template (a model folder, or a hub id already in the Hugging Face cache)"
    ]
    with pytest.raises(TransformUsageError, match="--per-turn applies"):
        transform(wh, TransformConfig(name="chat", per_turn=True))


def test_engine_rows_stay_as_they_were_beside_text_rows(wh, tmp_path, tokenizer_dir):
    commit_agl1(wh, plan(seed=3), tmp_path / "agl1")
    alone = transform(wh, TransformConfig(name="engine"))
    commit_text(wh, conversations(), tmp_path / "spool")
    skipped = transform(wh, TransformConfig(name="skipped"))
    assert skipped.manifest["counts"]["text_calls_skipped"] == 6
    assert "6 text calls skipped (no token ids: pass --tokenizer)" in skipped.summary()
    both = transform(wh, TransformConfig(name="both", tokenizer=str(tokenizer_dir)))
    engine_rows = sorted(rows_of(alone), key=lambda r: (r["rollout_id"], r["span_id"]))
    assert sorted(rows_of(skipped), key=lambda r: (r["rollout_id"], r["span_id"])) == engine_rows
    mixed = rows_of(both)
    assert (
        sorted(
            (r for r in mixed if not r["rollout_id"].startswith("chat-")),
            key=lambda r: (r["rollout_id"], r["span_id"]),
        )
        == engine_rows
    )
    assert both.manifest["counts"]["token_source"] == {"engine": len(engine_rows), "text": 3}
    assert alone.manifest["params"] == {**skipped.manifest["params"], "name": "engine"}  # no tokenizer keys


def test_a_template_that_drops_the_tools_is_counted_and_named(wh, tmp_path):
    folder = build_chat_tokenizer(tmp_path / "dropping", DROPPING_TEMPLATE)
    commit_text(wh, conversations(), tmp_path / "spool")
    result = transform(wh, TransformConfig(name="chat", tokenizer=str(folder)))
    drops = result.manifest["counts"]["text"]["template_drops"]
    assert drops == {"tools": 3, "tool_calls": 3, "first_example": "chat-0"}
    assert "dropped the tool list in 3 rows and 3 tool call names (first: rollout chat-0)" in result.summary()


def test_a_template_without_generation_markers_is_refused(wh, tmp_path):
    from tracebank.train.tiny_model import TOOL_CHAT_TEMPLATE

    folder = build_chat_tokenizer(tmp_path / "plain", TOOL_CHAT_TEMPLATE)
    commit_text(wh, conversations(), tmp_path / "spool")
    with pytest.raises(TransformUsageError, match="no {% generation %} markers"):
        transform(wh, TransformConfig(name="chat", tokenizer=str(folder)))


def test_an_uncached_hub_id_is_one_line_and_nothing_is_fetched(wh, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    commit_text(wh, conversations(), tmp_path / "spool")
    with pytest.raises(
        TransformUsageError, match="tokenizer some-org/some-model is not in the Hugging Face cache"
    ):
        transform(wh, TransformConfig(name="chat", tokenizer="some-org/some-model"))
    assert not (tmp_path / "empty-cache" / "models--some-org--some-model").exists()


def test_hostile_tool_calls_fail_their_conversation_only(wh, tmp_path, tokenizer_dir):
    bad = tool_conversation("chat-bad", "Lima")
    ask = {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": 5, "arguments": []}}, 7]}
    broken = dataclasses.replace(
        bad.calls[1], messages=[*bad.calls[1].messages[:2], ask], output=bad.calls[1].output
    )
    bad = dataclasses.replace(bad, calls=[bad.calls[0], Call(**{**broken.__dict__})])
    commit_text(wh, [*conversations(), bad], tmp_path / "spool")
    result = transform(wh, TransformConfig(name="chat", tokenizer=str(tokenizer_dir)))
    text = result.manifest["counts"]["text"]
    assert text["render_failed"] == 1 and text["rows"] == 3
    assert text["first_render_failure"].startswith("chat-bad: ")
    assert sorted(r["rollout_id"] for r in rows_of(result)) == ["chat-0", "chat-1", "chat-2"]
    assert "1 conversations failed to render" in result.summary()


def test_a_cached_hub_id_is_found_offline_and_its_revision_recorded(wh, tmp_path, tokenizer_dir, monkeypatch):
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hf-home" / "hub" / "models--tiny-org--tiny-chat"
    shutil.copytree(tokenizer_dir, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)  # no local folder named tiny-org/ shadows the id
    commit_text(wh, conversations(), tmp_path / "spool")
    by_folder = transform(wh, TransformConfig(name="folder", tokenizer=str(tokenizer_dir)))
    by_id = transform(wh, TransformConfig(name="hub", tokenizer="tiny-org/tiny-chat"))
    info, folder_info = (
        by_id.manifest["counts"]["text"]["tokenizer"],
        by_folder.manifest["counts"]["text"]["tokenizer"],
    )
    assert (info["name"], info["revision"]) == ("tiny-org/tiny-chat", commit)
    assert info["files_sha256"] == folder_info["files_sha256"]
    assert info["chat_template_sha256"] == folder_info["chat_template_sha256"]
    assert by_id.manifest["stats"]["tokens"] == by_folder.manifest["stats"]["tokens"]


def test_the_cli_renders_per_turn_and_says_so(wh, tmp_path, tokenizer_dir):
    commit_text(wh, conversations(), tmp_path / "spool")
    args = ["--warehouse", str(wh.root), "transform", "--dataset", "chat", "--tokenizer", str(tokenizer_dir)]
    out = CliRunner().invoke(cli, [*args, "--per-turn"])
    assert out.exit_code == 0, out.output
    assert out.output.startswith("wrote chat@v1: 6 rows (of 6 calls;")
    assert f"6 rows rendered by {tokenizer_dir}" in out.output


@pytest.mark.parametrize(
    "options", [{"engine": "ray"}, {"rules": "agl1"}, {"kind": "preference"}, {"tokenizer": " "}]
)
def test_tokenizer_options_that_cannot_apply_are_refused(options):
    config = TransformConfig(name="chat", **{"tokenizer": "tok", **options})
    with pytest.raises(TransformUsageError, match="--tokenizer"):
        config.validate()


def test_selection_options_apply_to_text_rows_as_to_engine_rows(wh, tmp_path, tokenizer_dir):
    twin = dataclasses.replace(tool_conversation("chat-twin", "Paris"), reward=0.5)  # chat-0's very text
    commit_text(wh, [*conversations(), twin], tmp_path / "spool")
    deduped = transform(wh, TransformConfig(name="dedup", tokenizer=str(tokenizer_dir), dedup=True))
    assert deduped.manifest["counts"]["dedup"] == 1
    assert sorted(r["rollout_id"] for r in rows_of(deduped)) == [
        "chat-0",
        "chat-1",
        "chat-2",
    ]  # best reward kept
    shortest = min(len(r["input_ids"]) for r in rows_of(deduped))
    capped = transform(wh, TransformConfig(name="cap", tokenizer=str(tokenizer_dir), max_length=shortest))
    assert all(len(r["input_ids"]) <= shortest for r in rows_of(capped))
    assert capped.manifest["counts"]["dropped_too_long"] == 4 - len(rows_of(capped))


def test_a_template_cannot_reach_python_objects(wh, tmp_path):
    escape = "{{ messages.__class__.__mro__[1].__subclasses__() }}{% generation %}x{% endgeneration %}"
    folder = build_chat_tokenizer(tmp_path / "escape", escape)
    commit_text(wh, conversations(), tmp_path / "spool")
    with pytest.raises(EmptyDatasetError) as refused:  # every rendering is refused by transformers' sandbox
        transform(wh, TransformConfig(name="chat", tokenizer=str(folder)))
    assert refused.value.hint.startswith(
        "3 conversations failed to render with the chat template (first: chat-0: "
    )
