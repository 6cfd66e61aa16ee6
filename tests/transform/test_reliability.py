"""A deleted silver file during transform is one line naming the fix (issue 12, point 5)."""

from __future__ import annotations

from click.testing import CliRunner
from tracebank.collect import build_silver
from tracebank.warehouse.location import Warehouse

from tests.fixtures.bronze import commit_collection
from tests.transform.oracle import scenario
from tracebank.cli.main import cli


def test_deleted_silver_file_during_transform_is_one_line_with_the_rebuild_silver_hint(tmp_path):
    wh = Warehouse(tmp_path / "warehouse").init()
    sc = scenario(seed=2, n_random=5)
    commit_collection(wh, sc.spans, rollouts=sc.rollouts(), attempts=sc.attempts, collection_id="c1")
    (manifest,) = build_silver(wh, ("c1",))
    calls = wh.silver_collection_dir("c1") / next(f.path for f in manifest.files if f.table == "llm_calls")
    calls.unlink()
    out = CliRunner().invoke(cli, ["--warehouse", str(wh.root), "transform", "--name", "ds"])
    assert out.exit_code == 1
    (line,) = out.stderr.splitlines()
    assert line.startswith(f"Error: committed file {calls} is missing")
    assert line.endswith("(rebuild it with `tracebank rebuild-silver --collection c1`)")
    args = ["--warehouse", str(wh.root)]
    rebuilt = CliRunner().invoke(cli, [*args, "rebuild-silver", "--collection", "c1"])
    assert rebuilt.exit_code == 0, rebuilt.output
    fixed = CliRunner().invoke(cli, [*args, "transform", "--name", "ds"])
    assert fixed.exit_code == 0, fixed.output
