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
