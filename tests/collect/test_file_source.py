"""`collect PATH --format chat`: a file or a folder through the one collect path; hostile files give
one line per bad record and keep the rest, a re-import adds nothing, a failed read commits nothing."""

from __future__ import annotations

import functools
import json
import os
import re

import pytest
from click.testing import CliRunner
from tracebank.collect import FileSource
from tracebank.collect.errors import CollectUsageError
from tracebank.collect.formats import chat
from tracebank.collect.formats.lines import json_lines
from tracebank.warehouse import bronze
from tracebank.warehouse.query import run_sql
from tracebank.warehouse.storage import Storage

import tracebank
from tests.collect.test_formats_chat import TOOLS, TURNS
from tracebank.cli.main import cli


def _line(i: int, **more) -> str:
    return json.dumps(
        {"messages": [*TURNS[:1], {"role": "user", "content": f"q{i}"}, *TURNS[2:]], "tools": TOOLS} | more
    )


def test_a_file_goes_in_once_with_its_calls_messages_and_rewards(wh, tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join([_line(0, reward=0.5), _line(1, id="conv-1")]) + "\n")
    first = tracebank.open(wh.root).collect(path)
    assert first.committed and first.store == f"chat:{path}"
    assert first.counts["rollouts"] == 2 and first.counts["bad_records"] == 0
    calls = run_sql(wh, "SELECT rollout_id FROM llm_calls ORDER BY ALL").column(0).to_pylist()
    assert calls == ["conv-1", "conv-1", *[r for r in calls if r.startswith("sha256:")]] and len(calls) == 4
    sources = run_sql(wh, "SELECT DISTINCT token_source, reject_reason FROM llm_calls").to_pylist()
    assert sources == [{"token_source": "text", "reject_reason": "no_prompt_ids"}]
    rewards = run_sql(wh, "SELECT value FROM rewards").column(0).to_pylist()
    assert rewards == [0.5]
    again = tracebank.open(wh.root).collect(str(path), format="chat")
    assert not again.committed and again.counts["skipped"] == 2 and again.counts["rollouts"] == 0
    assert len(Storage(wh).collections()) == 1


def test_a_hostile_folder_gives_one_line_per_bad_record_and_keeps_the_rest(wh, tmp_path, monkeypatch):
    monkeypatch.setattr(chat, "json_lines", functools.partial(json_lines, limit=2000))
    folder = tmp_path / "logs"
    folder.mkdir()
    outside = tmp_path / "secret.jsonl"
    outside.write_text(_line(99) + "\n")
    (folder / "a.jsonl").write_text(
        "\n".join(
            [
                _line(0),
                "{not json",
                json.dumps({"messages": TURNS, "pad": "x" * 5000}),
                '{"messages": ' + "[" * 100 + "]" * 100 + "}",
                json.dumps({"messages": [{"role": "user", "content": {"a": 1}}]}),
                '{"messages": [], "reward": NaN}',
                _line(1),
            ]
        )
    )
    (folder / "b.jsonl").write_text(_line(2) + "\n")
    os.mkfifo(folder / "c.jsonl")
    (folder / "d.jsonl").symlink_to(outside)
    result = tracebank.open(wh.root).collect(folder, format="chat")
    assert result.counts["rollouts"] == 3 and result.counts["bad_records"] == 5
    assert result.counts["files_left_out"] == 2 and result.store == f"chat:{folder}"
    assert result.warnings == [
        "c.jsonl: left out (not a file; only regular files are read)",
        "d.jsonl: left out (a link; only regular files are read)",
        "a.jsonl:2: not JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))",
        "a.jsonl:3: longer than 2000 bytes",
        "a.jsonl:4: nested deeper than 64 levels",
        "a.jsonl:5: message 0 `content` is a dict, not text, null or a list of parts",
        "a.jsonl:6: `reward` is nan (not standard JSON)",
    ]
    users = run_sql(wh, "SELECT DISTINCT content FROM messages WHERE role = 'user' ORDER BY 1")
    assert users.column(0).to_pylist() == ["q0", "q1", "q2"]  # nothing read through the link


def test_a_read_that_fails_half_way_commits_nothing(wh, tmp_path, monkeypatch):
    path = tmp_path / "train.jsonl"
    path.write_text(_line(0) + "\n" + _line(1) + "\n")
    real = chat.parse

    def failing(p):
        yield next(real(p))
        raise RuntimeError("disk gone")

    monkeypatch.setattr(chat, "parse", failing)
    with pytest.raises(RuntimeError):
        tracebank.open(wh.root).collect(path)
    assert Storage(wh).collections() == []
    monkeypatch.setattr(chat, "parse", real)
    assert tracebank.open(wh.root).collect(path).counts["rollouts"] == 2


def test_a_file_of_no_known_format_or_a_missing_path_is_a_usage_error(tmp_path):
    (tmp_path / "x.txt").write_text("hello\n")
    with pytest.raises(CollectUsageError, match="x.txt: left out \\(not a known format; give --format\\)"):
        FileSource(tmp_path / "x.txt")
    with pytest.raises(CollectUsageError, match="does not exist"):
        FileSource(tmp_path / "nope.jsonl", "chat")


def test_the_cli_prints_the_format_and_the_bad_records_without_a_traceback(wh, tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text(_line(0) + "\n[1]\n")
    base = ["--warehouse", str(wh.root), "collect", str(path)]
    out = CliRunner().invoke(cli, [*base, "--format", "chat"])
    assert out.exit_code == 0, out.output
    assert re.fullmatch(
        rf"collected c\w+-\w+ from chat:{re.escape(str(path))}: 1 new rollouts, 2 events, 0 skipped, "
        r"1 bad records, 0 evicted in \d+\.\ds\n"
        r"silver: 2 llm calls \(0 with token ids, 2 text only\), 0 rewards, 8 messages\n",
        out.stdout,
    )
    assert out.stderr == "Warning: train.jsonl:2: not a JSON object (a list)\n"
    again = CliRunner().invoke(cli, base)
    assert again.exit_code == 0 and again.stdout.startswith(
        f"nothing new from chat:{path}: 0 new rollouts, 0 events, 1 skipped, 1 bad records"
    )
    missing = CliRunner().invoke(cli, [*base[:-1], str(tmp_path / "nope"), "--format", "chat"])
    assert missing.exit_code == 2 and missing.stderr.count("\n") == 1 and "does not exist" in missing.stderr


def test_seed_003s_data_folder_goes_in_with_one_command_and_its_format_sniffed(wh, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text(_line(0) + "\n" + _line(1) + "\n")
    (data / "valid.jsonl").write_text(_line(2) + "\n")
    (data / "notes.txt").write_text("not a trace\n")
    out = CliRunner().invoke(cli, ["--warehouse", str(wh.root), "collect", str(data)])
    assert out.exit_code == 0, out.output
    assert out.stdout.startswith("collected ")
    assert f" from chat:{data}: 3 new rollouts, 6 events" in out.stdout
    assert out.stderr == "Warning: notes.txt: left out (not a known format; give --format)\n"


def test_bronze_and_silver_keep_every_object_in_the_order_the_file_wrote_it(wh, tmp_path):
    """A chat template renders ``tool | tojson`` and object arguments with ``tojson``: the warehouse must
    hand them back as written. Events keep their key order; the 0.3 tables' JSON stays sorted."""
    tool = {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "required": []}}}
    call = {"type": "function", "id": "c1", "function": {"name": "add", "arguments": {"b": 2, "a": 2}}}
    ask = {"role": "assistant", "content": None, "tool_calls": [call]}
    turns = [{"role": "user", "content": "2+2?"}, ask]
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"tools": [tool], "messages": turns}) + "\n")
    assert tracebank.open(wh.root).collect(path).committed
    (data,) = run_sql(wh, "SELECT data FROM events").column(0).to_pylist()
    request = json.loads(data)["request"]
    assert json.dumps(request["tools"]) == json.dumps([tool])
    assert json.dumps(request) == json.dumps({"messages": turns[:1], "tools": [tool]})
    silver = run_sql(wh, "SELECT tools, tool_calls FROM messages WHERE role = 'assistant'").to_pylist()
    assert silver == [{"tools": json.dumps([tool]), "tool_calls": json.dumps([call])}]
    assert json.dumps([tool]) != json.dumps([tool], sort_keys=True)  # the order is not the sorted one
    assert bronze.to_json({"b": 1, "a": {"d": 2, "c": 3}}) == '{"a": {"c": 3, "d": 2}, "b": 1}'


def test_a_big_import_is_written_a_file_of_events_at_a_time_and_reads_as_one(tmp_path):
    """The events of a file source (and a spool) are written as they come, in files cut between
    attempts (``rows_per_file``), so memory stays flat in the file's size; silver built a file at a
    time equals silver built from the whole table."""
    import pyarrow.parquet as pq

    path = tmp_path / "many.jsonl"
    path.write_text("".join(_line(i, id=f"conv-{i:03d}", reward=i / 50) + "\n" for i in range(50)))
    small, whole = tracebank.open(tmp_path / "small"), tracebank.open(tmp_path / "whole")
    split = small.collect(path, rows_per_file=7)
    one = whole.collect(path)
    assert split.counts["events"] == one.counts["events"] > 50
    manifest = Storage(small.readable()).collection(split.collection_id)
    folder = small.readable().collection_dir(split.collection_id)
    events = [
        pq.read_table(folder / f.path, columns=["rollout_id"]) for f in manifest.files if f.table == "events"
    ]
    assert len(events) > 5
    owners = [set(t.column("rollout_id").to_pylist()) for t in events]
    assert sum(len(o) for o in owners) == len(set().union(*owners)) == 50  # no attempt is cut in two
    for query in (
        "SELECT rollout_id, span_id, prompt_len, reject_reason, token_source, agent FROM llm_calls"
        " ORDER BY ALL",
        "SELECT rollout_id, span_id, message_index, role, content, tools FROM messages ORDER BY ALL",
        "SELECT rollout_id, value FROM rewards ORDER BY ALL",
    ):
        assert run_sql(small.readable(), query).to_pylist() == run_sql(whole.readable(), query).to_pylist()
