"""`tracebank transform --kind preference` and `train --method dpo` from the command line."""

from __future__ import annotations

import json

from click.testing import CliRunner

from tests.fixtures.preference import commit_03, plan
from tracebank.cli.main import cli


def run(wh, *args):
    return CliRunner().invoke(cli, [*args, "-w", str(wh.root)])


def test_preference_flags_reach_the_manifest_and_bad_ones_are_one_line(wh, tmp_path):
    commit_03(wh, plan(seed=3))
    flags = ["--kind", "preference", "--pairing", "all", "--min-margin", "0.5", "--pairs-per-task", "2"]
    out = run(wh, "transform", "--dataset", "prefs", *flags, "--unit", "trajectory")
    assert out.exit_code == 0, out.output
    assert out.stdout.startswith("wrote prefs@v1: ") and " pairs from " in out.stdout
    shown = json.loads(run(wh, "datasets", "show", "prefs", "--format", "json").stdout)
    assert shown["params"]["preference"] == {
        "min_margin": 0.5,
        "pairs_per_task": 2,
        "pairing": "all",
        "unit": "trajectory",
    }
    text = run(wh, "datasets", "show", "prefs").stdout
    assert "pairs" in text and "ties" in text
    bad = run(wh, "transform", "--dataset", "p", "--kind", "preference", "--top-fraction", "0.5")
    assert bad.exit_code == 2 and bad.stderr.startswith("Error: --top-fraction select SFT rows")
    bad = run(wh, "transform", "--dataset", "p", "--pairing", "all")
    assert bad.exit_code == 2 and "apply to --kind preference" in bad.stderr
    bad = run(wh, "transform", "--dataset", "p", "--kind", "preference", "--rewards", "nope")
    assert (
        bad.exit_code != 0 and "no reward layer named 'nope'" in bad.stderr and "Traceback" not in bad.output
    )
    bad = run(wh, "transform", "--dataset", "p", "--kind", "preference", "--engine", "ray")
    assert bad.exit_code == 2
    assert bad.output == "Error: --engine ray does not build --kind preference (use --engine local)\n"
