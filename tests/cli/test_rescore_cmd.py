"""`tracebank rescore` from the command line: progress on stderr, one summary line, one-line errors."""

from __future__ import annotations

from click.testing import CliRunner

from tests.fixtures.preference import commit_03, plan
from tracebank.cli.main import cli


def test_rescore_then_pairs_by_the_layer(wh, tmp_path):
    commit_03(wh, plan(seed=5))
    scorer = tmp_path / "scorers.py"
    scorer.write_text("def longer(rollout):\n    return float(len(rollout.final_response or ''))\n")
    args = ["rescore", "--scorer", f"{scorer}:longer", "--name", "long", "--workers", "1", "-w", str(wh.root)]
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    assert out.stdout.strip().splitlines()[-1].startswith("wrote reward layer long@v1: ")
    assert "rescored" in out.stderr
    again = CliRunner().invoke(cli, args)
    assert again.exit_code == 0 and "identical to long@v1" in again.stdout
    bad = CliRunner().invoke(cli, ["rescore", "--scorer", "nope", "--name", "x", "-w", str(wh.root)])
    assert bad.exit_code == 2 and bad.stderr.strip().startswith("Error: --scorer must be MODULE:FUNCTION")
    assert "Traceback" not in bad.output


def test_rescore_with_a_judge_endpoint_fails_each_rollout_of_a_down_one(wh, tmp_path, monkeypatch):
    from tracebank.serve.process import free_port

    monkeypatch.setenv("TRACEBANK_JUDGE_KEY", "sk-never-printed")
    rollouts = plan(seed=5, tasks=2)
    commit_03(wh, rollouts)
    rubric = tmp_path / "rubric.txt"
    rubric.write_text("Task: {task}\nAnswer: {answer}\nScore (1-5):")
    url = f"http://127.0.0.1:{free_port()}/v1"
    args = ["rescore", "--judge", "m", "--rubric", str(rubric), "--judge-url", url, "--judge-timeout", "2"]
    out = CliRunner().invoke(cli, [*args, "--name", "j", "--samples", "2", "-w", str(wh.root)])
    assert out.exit_code == 0, out.output
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith(f"wrote reward layer j@v1: 0 of {len(rollouts)} rollouts scored")
    assert "failed (first: JudgeFailed: cannot reach the judge endpoint" in last
    assert "sk-never-printed" not in out.output
    both = CliRunner().invoke(cli, [*args, "--scorer", "m:f", "--name", "x", "-w", str(wh.root)])
    assert both.exit_code == 2 and "exactly one of --scorer and --judge" in both.stderr
    scale = CliRunner().invoke(cli, [*args, "--scale", "1-10", "--name", "x", "-w", str(wh.root)])
    assert scale.exit_code == 2 and scale.stderr.startswith("Error: --scale must be LO-HI")
