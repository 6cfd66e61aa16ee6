"""`tracebank round` via CliRunner: bad input is one line and a non-zero exit; a real round runs."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner
from tracebank.serve.process import free_port
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.query import run_sql

from tests.cli_args import cli_args
from tracebank.cli.main import cli

AGENT = "tracebank.loop.toy_agent:repeat_text"


@pytest.fixture
def tasks_file(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(json.dumps({"text": t}) for t in ("the cat", "a red fox", "sun day")) + "\n")
    return path


def _round(position, wh_root, *args):
    return CliRunner().invoke(cli, cli_args(wh_root, position, "round", *args))


def _error(result) -> str:
    assert result.stdout == "", result.stdout
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    return result.stderr


def test_missing_tasks_file(tmp_path, model_v0, warehouse_position):
    missing = tmp_path / "nope.jsonl"
    out = _round(
        warehouse_position,
        tmp_path / "wh",
        "--base-model",
        str(model_v0),
        "--agent",
        AGENT,
        "--tasks",
        str(missing),
        "--store",
        "http://127.0.0.1:1",
        "--server",
        "cpu",
    )
    assert out.exit_code == 2
    assert (
        _error(out)
        == f"Error: tasks file {missing} does not exist (pass --tasks a JSONL file, one task per line)\n"
    )


def test_tasks_file_with_a_bad_line(tmp_path, model_v0, warehouse_position):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{not json\n')
    out = _round(
        warehouse_position,
        tmp_path / "wh",
        "--base-model",
        str(model_v0),
        "--agent",
        AGENT,
        "--tasks",
        str(bad),
        "--store",
        "http://127.0.0.1:1",
        "--server",
        "cpu",
    )
    assert out.exit_code == 2
    assert _error(out).startswith(f"Error: {bad}:2 is not JSON: ")


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("nocolon", "Error: invalid agent 'nocolon' (use module:function, e.g. my_agents:math_agent)\n"),
        (
            "no_such_agent_module:run",
            "Error: cannot import agent module 'no_such_agent_module': No module named "
            "'no_such_agent_module' (is it on PYTHONPATH (run from its folder)?)\n",
        ),
        (
            "tracebank.loop.toy_agent:nothing",
            "Error: agent module 'tracebank.loop.toy_agent' has no 'nothing' (use module:function "
            "naming an agentlightning rollout)\n",
        ),
        (
            "tracebank.loop.toy_agent:WORDS",
            "Error: tracebank.loop.toy_agent:WORDS is a tuple, not an agent (use a function "
            "(task, llm[, rollout]) or an @agl.rollout agent)\n",
        ),
    ],
)
def test_bad_agent_spec(tmp_path, tasks_file, model_v0, spec, expected, warehouse_position):
    out = _round(
        warehouse_position,
        tmp_path / "wh",
        "--base-model",
        str(model_v0),
        "--agent",
        spec,
        "--tasks",
        str(tasks_file),
        "--store",
        "http://127.0.0.1:1",
        "--server",
        "cpu",
    )
    assert out.exit_code == 2
    assert _error(out) == expected


def test_a_function_that_is_not_a_rollout(tmp_path, tasks_file, model_v0, warehouse_position):
    out = _round(
        warehouse_position,
        tmp_path / "wh",
        "--base-model",
        str(model_v0),
        "--agent",
        "tracebank.loop.toy_agent:similarity",
        "--tasks",
        str(tasks_file),
        "--store",
        "http://127.0.0.1:1",
        "--server",
        "cpu",
    )
    assert out.exit_code == 2
    assert _error(out).startswith(
        "Error: tracebank.loop.toy_agent:similarity is not an agentlightning rollout: "
    )


def test_missing_model_folder(tmp_path, tasks_file, warehouse_position):
    out = _round(
        warehouse_position,
        tmp_path / "wh",
        "--base-model",
        str(tmp_path / "none"),
        "--agent",
        AGENT,
        "--tasks",
        str(tasks_file),
        "--store",
        "http://127.0.0.1:1",
        "--server",
        "cpu",
    )
    assert out.exit_code == 2
    assert (
        _error(out) == f"Error: model folder {tmp_path / 'none'} does not exist "
        "(pass --base-model a local model folder)\n"
    )


def test_bad_store_url_and_unreachable_store(tmp_path, tasks_file, model_v0, warehouse_position):
    args = ["--base-model", str(model_v0), "--agent", AGENT, "--tasks", str(tasks_file), "--server", "cpu"]
    out = _round(warehouse_position, tmp_path / "wh", *args, "--store", "localhost:4747")
    assert out.exit_code == 2
    assert (
        _error(out)
        == "Error: invalid store URL 'localhost:4747' (use http://HOST:PORT, e.g. http://127.0.0.1:4747)\n"
    )
    url = f"http://127.0.0.1:{free_port()}"
    out = _round(warehouse_position, tmp_path / "wh", *args, "--store", url)
    assert out.exit_code == 1
    assert _error(out) == (
        f"Error: cannot reach the store at {url} (connection refused) "
        "(is `agl store` running there? check --store)\n"
    )


def test_bad_top_fraction(tmp_path, tasks_file, model_v0, warehouse_position):
    out = _round(
        warehouse_position,
        tmp_path / "wh",
        "--base-model",
        str(model_v0),
        "--agent",
        AGENT,
        "--tasks",
        str(tasks_file),
        "--store",
        "http://127.0.0.1:1",
        "--server",
        "cpu",
        "--then",
        "transform",
        "--top-fraction",
        "2",
    )
    assert out.exit_code == 2
    assert _error(out) == "Error: --top-fraction must be in (0, 1], got 2.0\n"


def test_vllm_refuses_a_model_its_cpu_attention_cannot_serve(
    tmp_path, tasks_file, model_v0, warehouse_position
):
    out = _round(
        warehouse_position,
        tmp_path / "wh",
        "--base-model",
        str(model_v0),
        "--agent",
        AGENT,
        "--tasks",
        str(tasks_file),
        "--store",
        "http://127.0.0.1:1",
    )
    assert out.exit_code == 2
    assert _error(out) == (
        f"Error: {model_v0} has head_dim 16; vLLM's CPU attention refuses heads below 32 (serve it "
        "with --server cpu, or use a model with larger heads (the tiny Qwen3 has 64))\n"
    )


def test_a_round_with_local_runners_collects_its_rollouts(
    tmp_path, tasks_file, model_v0, store_url, warehouse_position
):
    out = _round(
        warehouse_position,
        tmp_path / "wh",
        "--base-model",
        str(model_v0),
        "--agent",
        AGENT,
        "--tasks",
        str(tasks_file),
        "--store",
        store_url,
        "--server",
        "cpu",
        "--runners",
        "2",
        "--then",
        "collect",
        "--tag",
        "cli",
        "--timeout",
        "120",
    )
    assert out.exit_code == 0, out.output
    # only the result reaches stdout: LiteLLM's banner and the libraries' logs go to stderr
    assert re.fullmatch(r"round done: 3 rollouts \(3 succeeded\) in \d+s\n", out.stdout), out.stdout
    assert "rollouts done in" in out.stderr and "collected c" in out.stderr
    wh = Warehouse(tmp_path / "wh")
    rows = run_sql(
        wh,
        "SELECT c.tag, r.status, json_extract_string(r.input, '$.text') AS text "
        "FROM rollouts r JOIN collections c USING (collection_id) ORDER BY text",
    ).to_pylist()
    assert rows == [
        {"tag": "cli", "status": "succeeded", "text": t} for t in ("a red fox", "sun day", "the cat")
    ]


def test_a_round_from_a_config_file_with_a_flag_over_it(tmp_path, tasks_file, model_v0, store_url):
    config = tmp_path / "round.yaml"
    config.write_text(
        f"base-model: {model_v0}\nagent: {AGENT}\ntasks: {tasks_file}\nstore: {store_url}\n"
        "server: cpu\nrunners: 2\nthen: collect\ntag: from-file\ntimeout: 120\n"
    )
    out = _round("before", tmp_path / "wh", "--config", str(config), "--tag", "from-flag")
    assert out.exit_code == 0, out.output
    assert re.fullmatch(r"round done: 3 rollouts \(3 succeeded\) in \d+s\n", out.stdout), out.stdout
    rows = run_sql(Warehouse(tmp_path / "wh"), "SELECT tag FROM collections").to_pylist()
    assert rows == [{"tag": "from-flag"}]


@pytest.mark.parametrize(
    "text, message",
    [
        ("agent: a:b\nthne: train\n", "Error: config file {config} has unknown option(s) thne"),
        ("timeout: soon\n", "Error: Invalid value for '--timeout': 'soon' is not a valid float."),
        ("tasks: {missing}\n", "Error: tasks file {missing} does not exist"),
    ],
)
def test_a_bad_round_config_file_is_one_line(tmp_path, tasks_file, model_v0, text, message):
    config, missing = tmp_path / "round.yaml", tmp_path / "nope.jsonl"
    flags = ["--agent", AGENT, "--tasks", str(tasks_file), "--store", "http://127.0.0.1:1", "--server", "cpu"]
    config.write_text(text.format(missing=missing))
    given = [f for i, f in enumerate(flags) if not (text.startswith("tasks") and 2 <= i <= 3)]
    out = _round("before", tmp_path / "wh", "--config", str(config), "--base-model", str(model_v0), *given)
    assert out.exit_code == 2
    assert _error(out).startswith(message.format(config=config, missing=missing))
