"""`tracebank export`: chat formats, weights on untrained turns, the round trip, TRL on the output."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from tracebank.transform import TransformConfig, transform
from tracebank.view import ExportConfig, export
from tracebank.warehouse.catalog import resolve_dataset
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.query import run_sql

from tests.fixtures.preference import commit_03, plan
from tracebank.cli.main import cli


def _run(view_wh, *args):
    return CliRunner().invoke(cli, ["--warehouse", str(view_wh.wh.root), "export", *args])


def _jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_openai_jsonl_says_how_many_rows_round_trip_and_why_not(view_wh, tmp_path):
    out = tmp_path / "mixed.jsonl"
    result = _run(view_wh, "mixed@v1", "-o", str(out), "--tokenizer", str(view_wh.model))
    assert result.exit_code == 0, result.output
    assert result.output == (
        f"exported 4 rows of mixed@v1 as openai to {out}\n"
        f"0 of 4 rows round-trip to the stored token ids with the chat template of {view_wh.model}: "
        "2 prompt ids differ from the chat template's rendering of its messages; "
        "1 reply cut before its end-of-turn token (a max-tokens stop); "
        "1 reply ids do not re-encode to themselves (invalid UTF-8 or another BPE spelling)\n"
    )


def test_qa_rows_all_round_trip(view_wh, tmp_path):
    result = _run(view_wh, "qa", "-o", str(tmp_path / "qa.jsonl"), "--tokenizer", str(view_wh.model))
    assert result.exit_code == 0, result.output
    assert (
        result.output.splitlines()[1]
        == f"16 of 16 rows round-trip to the stored token ids with the chat template of {view_wh.model}"
    )


def test_tool_calls_and_weight_zero_on_turns_the_version_does_not_train(view_wh, tmp_path):
    out = tmp_path / "mixed.jsonl"
    assert _run(view_wh, "mixed", "-o", str(out)).exit_code == 0
    records = _jsonl(out)
    answer = next(r for r in records if len(r["messages"]) == 5)["messages"]
    assert [m["role"] for m in answer] == ["system", "user", "assistant", "tool", "assistant"]
    assert answer[2]["tool_calls"] == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }
    ]
    assert answer[2]["weight"] == 0
    assert answer[3] == {"role": "tool", "content": "sunny, 21 C", "tool_call_id": "call_1"}
    assert answer[4] == {"role": "assistant", "content": "It is sunny, 21 C.", "weight": 1}
    tools = next(r for r in records if len(r["messages"]) == 5)["tools"]
    assert tools == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather of a city",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        }
    ]
    # The row of the first call trains the tool call itself.
    first = next(r for r in records if len(r["messages"]) == 3 and "tool_calls" in r["messages"][2])
    assert first["messages"][2]["weight"] == 1


def test_without_a_tokenizer_it_says_the_round_trip_was_not_checked(view_wh, tmp_path):
    result = _run(view_wh, "qa@v1", "--to", "trl-messages", "-o", str(tmp_path / "m.jsonl"))
    assert (
        result.output.splitlines()[1]
        == "round trip not checked (pass --tokenizer with the model's chat template)"
    )
    first = _jsonl(tmp_path / "m.jsonl")[0]
    assert set(first) == {"messages"} and first["messages"][-1]["role"] == "assistant"


def test_an_existing_output_is_kept_unless_forced(view_wh, tmp_path):
    out = tmp_path / "x.jsonl"
    assert _run(view_wh, "qa", "-o", str(out)).exit_code == 0
    result = _run(view_wh, "qa", "-o", str(out))
    assert result.exit_code == 2
    assert result.output == f"Error: {out} exists (pass --force to overwrite it, or choose another path)\n"
    out.write_text(out.read_text().splitlines()[0] + "\n")  # edited: no longer what export wrote
    assert _run(view_wh, "qa", "-o", str(out), "--force").exit_code == 2
    assert len(_jsonl(out)) == 1
    out.unlink()
    assert _run(view_wh, "qa", "-o", str(out)).exit_code == 0
    assert _run(view_wh, "qa", "-o", str(out), "--force").exit_code == 0
    assert len(_jsonl(out)) == 16


def _files(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_force_never_deletes_what_export_did_not_write(view_wh, tmp_path):
    """The warehouse, a folder above it, a user's file and a folder never become an export."""
    root = view_wh.wh.root
    before = _files(root.parent)
    mine = tmp_path / "notes.jsonl"
    mine.write_text("my own data\n")
    hf = tmp_path / "hf"
    assert _run(view_wh, "qa", "--to", "hf", "-o", str(hf)).exit_code == 0
    hf_files = _files(hf)
    inside = root / "datasets" / "x.jsonl"
    refused = {
        ("--to", "hf", "-o", str(root)): f"Error: --output {root} is the warehouse {root}",
        ("--to", "hf", "-o", str(root.parent)): f"Error: --output {root.parent} holds the warehouse",
        ("-o", str(inside)): f"Error: --output {inside} is inside the warehouse",
        ("-o", str(mine)): f"Error: {mine} exists and was not written by tracebank export",
        ("-o", str(hf)): f"Error: --output {hf} is a folder; tracebank export writes a file here",
    }
    for args, message in refused.items():
        result = _run(view_wh, "qa", *args, "--force")
        assert result.exit_code == 2, (args, result.output)
        assert result.output.startswith(message) and result.output.count("\n") == 1, result.output
    assert _files(root.parent) == before
    assert mine.read_text() == "my own data\n" and _files(hf) == hf_files
    # Its own folder is replaced with --force, and only the export's files are in it afterwards.
    assert _run(view_wh, "qa", "--to", "hf", "-o", str(hf), "--force").exit_code == 0
    assert set(_files(hf)) == set(hf_files)


def test_an_unknown_version_is_one_line(view_wh, tmp_path):
    result = _run(view_wh, "qa@v9", "-o", str(tmp_path / "x.jsonl"))
    assert result.exit_code == 1
    assert result.output == "Error: dataset qa@v9 does not exist (qa has versions v1)\n"


def test_hf_folder_keeps_the_splits_and_the_stored_ids(view_wh, tmp_path):
    from datasets import load_from_disk

    out = tmp_path / "qa-hf"
    result = export(view_wh.wh, ExportConfig(dataset="qa", output=out, format="hf"))
    assert result.rows == 16
    loaded = load_from_disk(str(out))
    _, folder, _ = resolve_dataset(view_wh.wh, "qa@v1")
    for split in ("train", "validation"):
        stored = pq.read_table(folder / f"{split}.parquet")
        assert loaded[split]["input_ids"] == stored.column("input_ids").to_pylist()
        assert loaded[split]["labels"] == stored.column("labels").to_pylist()
    assert json.loads(loaded["train"][0]["completion"])[0]["role"] == "assistant"


def test_trl_sft_trainer_on_exported_rows_trains_the_versions_tokens(view_wh, tmp_path):
    """A plain TRL SFTTrainer on the prompt-completion export trains exactly the version's tokens."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, Trainer
    from trl import SFTConfig, SFTTrainer

    class CpuLossSFTTrainer(SFTTrainer):
        """TRL 1.15's SFT loss runs only as a Triton kernel (GPU); on CPU take the model's own
        causal-LM loss over the same labels. Tokenizing, masking and collating stay TRL's."""

        compute_loss = Trainer.compute_loss

    out = tmp_path / "qa.jsonl"
    assert (
        _run(view_wh, "qa@v1", "--to", "trl-prompt-completion", "--split", "train", "-o", str(out)).exit_code
        == 0
    )
    rows = _jsonl(out)
    trainer = CpuLossSFTTrainer(
        model=AutoModelForCausalLM.from_pretrained(str(view_wh.model)),
        processing_class=view_wh.tokenizer,
        train_dataset=Dataset.from_list(rows),
        args=SFTConfig(
            output_dir=str(tmp_path / "sft"),
            max_steps=2,
            per_device_train_batch_size=4,
            report_to="none",
            use_cpu=True,
            save_strategy="no",
            logging_steps=1,
        ),
    )
    _, folder, _ = resolve_dataset(view_wh.wh, "qa@v1")
    stored = pq.read_table(folder / "train.parquet").to_pylist()
    tokenized = trainer.train_dataset
    assert len(tokenized) == len(stored) == 12
    for mine, theirs in zip(stored, tokenized, strict=True):
        assert theirs["input_ids"] == mine["input_ids"]
        assert theirs["labels"] == mine["labels"]
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 2 and all(loss > 0 for loss in losses)


LINE_BREAKERS = "one\u2028two\u2029three"


@pytest.mark.parametrize(
    "fmt", ["openai", "trl-messages", "trl-prompt-completion", "trl-preference", "openai-preference"]
)
def test_jsonl_exports_escape_u2028_and_u2029(wh, tmp_path, fmt):
    """The finding: JSONL exports kept raw U+2028 / U+2029 (valid JSON, but JavaScript's and
    Python's line splitters end a line there and cut the record in two)."""
    planned = plan(seed=5)
    for rollout in planned:
        rollout.replies = [f"{LINE_BREAKERS} {reply}" for reply in rollout.replies]
    commit_03(wh, planned)
    preference = fmt.endswith("preference")
    transform(wh, TransformConfig(name="d", kind="preference" if preference else "sft"))
    out = tmp_path / "d.jsonl"
    export(wh, ExportConfig(dataset="d", output=out, format=fmt))
    text = out.read_text(encoding="utf-8")
    assert "\u2028" not in text and "\u2029" not in text
    records = [json.loads(line) for line in text.splitlines()]  # splitlines splits at U+2028 too
    assert records and all(LINE_BREAKERS in json.dumps(r, ensure_ascii=False) for r in records)


def _conversations(wh, where: str = "") -> set[str]:
    """Each call's whole conversation (its input messages, then its output, and the request's
    tools) from the silver ``messages`` table, as canonical JSON."""
    rows = run_sql(
        wh,
        "SELECT span_id, role, content, tool_calls, tool_call_id, tools FROM messages "
        f"{where} ORDER BY span_id, direction, message_index",
    ).to_pylist()
    calls: dict[str, list[dict]] = {}
    for r in rows:
        calls.setdefault(r.pop("span_id"), []).append(r)
    out = set()
    for msgs in calls.values():
        tools = next((json.loads(m["tools"]) for m in msgs if m["tools"]), [])
        shown = [
            {
                "role": m["role"],
                "content": m["content"] or None,
                "tool_calls": json.loads(m["tool_calls"]) if m["tool_calls"] else None,
                "tool_call_id": m["tool_call_id"] or None,
            }
            for m in msgs
        ]
        out.add(json.dumps({"messages": shown, "tools": tools}, sort_keys=True))
    return out


def test_an_openai_export_has_tools_on_every_row_and_collects_back_to_the_same_conversations(
    view_wh, tmp_path
):
    out = tmp_path / "train.jsonl"
    for name in ("mixed", "qa"):
        out.unlink(missing_ok=True)
        assert _run(view_wh, name, "-o", str(out)).exit_code == 0
        records = _jsonl(out)
        assert all(isinstance(r["tools"], list) for r in records)
        assert any(r["tools"] for r in records) == (name == "mixed")
        again = Warehouse(tmp_path / name).init()
        result = CliRunner().invoke(cli, ["--warehouse", str(again.root), "collect", str(out)])
        assert result.exit_code == 0 and " 0 bad records" in result.output, result.output
        # the last call of each imported rollout is the exported row's whole conversation
        last = "WHERE span_id IN (SELECT max_by(span_id, span_index) FROM messages GROUP BY rollout_id)"
        imported = _conversations(again, last)
        assert len(imported) == len({json.dumps(r, sort_keys=True) for r in records})
        assert imported <= _conversations(view_wh.wh)
