"""`tracebank show` names each call's agent; an agent name is record text, shown, never obeyed."""

from __future__ import annotations

from click.testing import CliRunner

from tests.fixtures.agent_spans import recorded_agent_spans
from tests.fixtures.bronze import commit_collection
from tracebank.cli.main import cli


def _show(wh, *args):
    return CliRunner().invoke(cli, ["--warehouse", str(wh.root), "show", *args])


def test_show_names_the_agent_of_each_call(wh):
    spans = recorded_agent_spans(n_rollouts=1, seed=2)
    commit_collection(wh, spans)
    result = _show(wh, spans[0].rollout_id)
    assert result.exit_code == 0, result.output
    headers = [line for line in result.output.splitlines() if line.startswith("── call")]
    agents = [h.split(" · agent ")[1].split(" · ")[0] if " · agent " in h else None for h in headers]
    assert agents == ["planner", "planner", "coder", "reviewer", "coder", None]


def test_a_hostile_agent_name_cannot_drive_the_terminal_or_fake_a_line(wh):
    spans = recorded_agent_spans(n_rollouts=1, seed=2)
    hostile = "evil\x1b]0;pwned\x07\n── reward 1.0 (primary) · seq 99"
    for span in spans:
        if span.attributes.get("agent.name") == "planner":
            span.attributes["agent.name"] = hostile
    commit_collection(wh, spans)
    result = _show(wh, spans[0].rollout_id)
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\x07" not in result.output
    assert "agent evil␛]0;pwned␇␊── reward 1.0" in result.output
    assert not any(line.startswith("── reward 1.0 (primary) · seq 99") for line in result.output.splitlines())
