"""transform --agent-key: what names a 1.0 call's agent for --agent (its request's model, system prompt,
tools, or a function of the user's); 0.3 span calls keep their span-derived agent."""

from __future__ import annotations

from collections import Counter

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from tracebank.transform import TransformConfig, transform
from tracebank.transform.agent_key import system_name, tools_name
from tracebank.transform.errors import EmptyDatasetError, TransformError, TransformUsageError

from tests.fixtures.agent_spans import recorded_agent_spans
from tests.fixtures.bronze import commit_collection
from tests.fixtures.preference import Planned, commit_agl1
from tracebank.cli.main import cli

PLANNER, CODER = 11, 21  # the first id of each agent's replies: which agent a row is from
SYSTEMS = {"planner": "You plan the work.", "coder": "You write the code."}
TOOLS = {"planner": ["search"], "coder": ["run_python", "read_file"]}


def _tool(name: str) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}


def _request(rollout: Planned, i: int) -> dict:
    """Call 0 of each rollout is the planner's, call 1 the coder's: same model, their own prompt and tools."""
    agent = ("planner", "coder")[i]
    messages = [{"role": "system", "content": SYSTEMS[agent]}, {"role": "user", "content": rollout.task}]
    return {"model": "tiny", "messages": messages, "tools": [_tool(t) for t in TOOLS[agent]]}


@pytest.fixture
def agl1(wh, tmp_path):
    # one task, the same prompts: three rollouts whose replies differ, rewards 0, 0.5 and 1
    calls = [[([1, 2, 3], [PLANNER, 12, 30 + k]), ([4, 5, 6], [CODER, 22, 40 + k])] for k in range(3)]
    rollouts = [Planned(f"ro-{k}", "t", calls[k], reward=k / 2) for k in range(3)]
    commit_agl1(wh, rollouts, tmp_path / "spool", request=_request)
    return wh


def replies(result) -> Counter:
    """How many rows train on each agent's reply."""
    table = pq.read_table(result.folder / "train.parquet")
    return Counter(next(t for t in r["labels"] if t != -100) for r in table.to_pylist())


PLANNER_ROWS, CODER_ROWS = Counter({PLANNER: 3}), Counter({CODER: 3})


def test_system_key_tells_the_agents_apart(agl1):
    planner = f"^{system_name(SYSTEMS['planner'])}$"
    result = transform(agl1, TransformConfig(name="p", agent=planner, agent_key="system"))
    assert replies(result) == PLANNER_ROWS
    assert result.record.counts["other_agents"] == 3
    assert result.manifest["params"]["agent_key"] == "system"
    coder = transform(agl1, TransformConfig(name="c", agent="^system:", agent_key="system"))
    assert replies(coder) == PLANNER_ROWS + CODER_ROWS


def test_system_name_is_sha256_of_the_system_text():
    import hashlib

    assert (
        system_name("You plan the work.") == "system:" + hashlib.sha256(b"You plan the work.").hexdigest()[:8]
    )


def test_tools_key_names_the_sorted_tool_names(agl1):
    coder = transform(
        agl1, TransformConfig(name="c", agent="^tools:read_file,run_python$", agent_key="tools")
    )
    assert replies(coder) == CODER_ROWS
    planner = transform(agl1, TransformConfig(name="p", agent="search", agent_key="tools"))
    assert replies(planner) == PLANNER_ROWS


def test_model_key_and_default_tag_see_one_agent(agl1):
    for key in ("model", "tag"):
        result = transform(agl1, TransformConfig(name=key, agent="^tiny$", agent_key=key))
        assert replies(result) == PLANNER_ROWS + CODER_ROWS
    with pytest.raises(EmptyDatasetError):  # the default key is silver's tag-or-model, not the prompt
        transform(agl1, TransformConfig(name="none", agent="^system:"))


def test_default_key_keeps_params_and_hash(agl1):
    before = transform(agl1, TransformConfig(name="d", agent="tiny"))
    assert "agent_key" not in before.manifest["params"]
    assert (
        TransformConfig(name="d", agent="tiny").params()
        == TransformConfig(name="d", agent="tiny", agent_key="tag").params()
    )
    same = transform(agl1, TransformConfig(name="d", agent="tiny", agent_key="tag"))
    assert same.manifest["content_hash"] == before.manifest["content_hash"]
    keyed = transform(agl1, TransformConfig(name="d", agent="tiny", agent_key="model"))
    assert keyed.manifest["content_hash"] != before.manifest["content_hash"]  # the key is recorded


def test_a_user_function_names_the_agents(agl1, tmp_path):
    seen = tmp_path / "seen.txt"
    module = tmp_path / "names.py"
    module.write_text(
        "def by_tools(request):\n"
        f"    line = request['model'] + ' ' + request['messages'][0]['role'] + '\\n'\n"
        f"    open({str(seen)!r}, 'a').write(line)\n"
        "    names = [t['function']['name'] for t in request['tools']]\n"
        "    return 'writer' if 'run_python' in names else None\n"
    )
    result = transform(agl1, TransformConfig(name="u", agent="^writer$", agent_key=f"{module}:by_tools"))
    assert replies(result) == CODER_ROWS
    assert seen.read_text().splitlines() == ["tiny system"] * 6  # each 1.0 call's request, once
    assert result.manifest["params"]["agent_key"] == f"{module}:by_tools"


def test_a_user_function_also_selects_preference_calls(agl1, tmp_path):
    module = tmp_path / "pick.py"
    module.write_text("def agent(request):\n    return request['messages'][0]['content']\n")
    config = TransformConfig(name="pref", kind="preference", agent="plan", agent_key=f"{module}:agent")
    pairs = pq.read_table(transform(agl1, config).folder / "train.parquet").to_pylist()
    assert [(p["chosen_labels"], p["rejected_labels"]) for p in pairs] == [
        ([PLANNER, 12, 32], [PLANNER, 12, 30])
    ]


@pytest.mark.parametrize(
    "key, message",
    [
        ("no_such_module_for_agents:name", "cannot import agent key module 'no_such_module_for_agents'"),
        ("tracebank.transform:no_such_function", "has no function 'no_such_function'"),
        ("/no/such/file.py:name", "agent key file /no/such/file.py does not exist"),
    ],
)
def test_a_bad_module_function_is_one_usage_line(agl1, key, message):
    with pytest.raises(TransformUsageError, match=message) as info:
        transform(agl1, TransformConfig(name="x", agent="a", agent_key=key))
    assert "\n" not in info.value.one_line()


@pytest.mark.parametrize("key", ["bogus", ":f", "module:", "SYSTEM"])
def test_a_bad_key_is_refused_before_anything_is_read(key):
    with pytest.raises(TransformUsageError, match="--agent-key must be one of tag, model, system, tools"):
        TransformConfig(name="x", agent="a", agent_key=key).validate()


def test_a_key_without_agent_is_refused():
    with pytest.raises(TransformUsageError, match="--agent-key names the agents --agent selects"):
        TransformConfig(name="x", agent_key="system").validate()


def test_cli_bad_function_prints_one_line(agl1):
    out = CliRunner().invoke(
        cli,
        [
            "--warehouse",
            str(agl1.root),
            "transform",
            "--dataset",
            "x",
            "--agent",
            "a",
            "--agent-key",
            "nope_mod:f",
        ],
    )
    assert out.exit_code == 2
    assert len(out.output.strip().splitlines()) == 1 and "cannot import agent key module" in out.output


def test_cli_system_key(agl1):
    args = ["transform", "--dataset", "s", "--agent", system_name(SYSTEMS["coder"]), "--agent-key", "system"]
    out = CliRunner().invoke(cli, ["--warehouse", str(agl1.root), *args])
    assert out.exit_code == 0, out.output
    assert out.output.startswith("wrote s@v1: 3 rows")


@pytest.mark.parametrize(
    "returns, message", [("42", "returned a int"), ("1 / 0", "raised ZeroDivisionError: division by zero")]
)
def test_a_failing_user_function_is_one_line(agl1, tmp_path, returns, message):
    module = tmp_path / "bad_names.py"
    module.write_text(f"def name(request):\n    return {returns}\n")
    with pytest.raises(TransformError, match=message) as info:
        transform(agl1, TransformConfig(name="x", agent="a", agent_key=f"{module}:name"))
    assert "\n" not in info.value.one_line()


def test_hostile_tools_are_names_or_nothing():
    weird = [
        None,
        "x",
        {"function": "nope"},
        {"function": {"name": 7}},
        {"name": "bare"},
        _tool("b"),
        _tool("b"),
    ]
    assert tools_name(weird) == "tools:b,bare"
    assert tools_name([]) is None and tools_name(None) is None
    long = tools_name([_tool("t" * 150), _tool("u" * 150)])
    assert long is not None and long.startswith("tools:sha256-") and len(long) == len("tools:sha256-") + 12


def test_span_calls_keep_their_span_agent(wh):
    """0.3 calls are named by their enclosing agent span whatever the key (their traces name agents)."""
    commit_collection(wh, recorded_agent_spans(n_rollouts=2, seed=5))
    spans = transform(wh, TransformConfig(name="a", agent="^planner$"))
    for key in ("model", "system", "tools"):
        keyed = transform(wh, TransformConfig(name=key, agent="^planner$", agent_key=key))
        assert pq.read_table(keyed.folder / "train.parquet").equals(
            pq.read_table(spans.folder / "train.parquet")
        )


def test_the_warehouse_api_takes_the_key(agl1):
    import tracebank

    coder = system_name(SYSTEMS["coder"])
    dataset = tracebank.open(agl1.root).transform("api", agent=coder, agent_key="system")
    assert dataset.manifest["params"]["agent_key"] == "system"
