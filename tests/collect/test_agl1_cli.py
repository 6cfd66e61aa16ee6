"""`tracebank collect --spool | --store` for Agent Lightning 1.0, then `transform --rules agl1`."""

from __future__ import annotations

import re
import shutil

import pyarrow.parquet as pq
from click.testing import CliRunner
from tracebank.warehouse.query import run_sql
from tracebank.warehouse.storage import Storage

from tests.fixtures.agl1_server import ROUND_PROMPTS, play_scenario
from tracebank.cli.main import cli

COLLECTED = r"collected c\w+-\w+: (\d+) new rollouts, (\d+) events, (\d+) skipped, 0 evicted in \d+\.\ds"
SILVER = (
    r"silver: (\d+) llm calls \((\d+) with token ids(?:, \d+ text only)?\), (\d+) rewards, (\d+) messages"
)


def test_spool_to_dataset_through_the_cli(agl1_round, wh, tmp_path):
    spool = tmp_path / "spool"
    shutil.copytree(agl1_round[0], spool)
    run = CliRunner()
    base = ["--warehouse", str(wh.root)]
    first = run.invoke(cli, [*base, "collect", "--spool", str(spool)])
    assert first.exit_code == 0, first.output
    summary, silver = first.stdout.splitlines()
    n = len(ROUND_PROMPTS)
    events = sum(len(c["events"]) for c in agl1_round[1]["completed"])
    assert re.fullmatch(COLLECTED, summary).groups() == (str(n), str(events), "0")
    assert re.fullmatch(SILVER, silver) and first.stderr == ""
    again = run.invoke(cli, [*base, "collect", "--spool", str(spool)])
    assert re.fullmatch(
        r"nothing new: 0 new rollouts, 0 events, 0 skipped, 0 evicted in \d+\.\ds\n", again.stdout
    )

    out = run.invoke(
        cli, [*base, "transform", "--dataset", "agl1", "--rules", "agl1", "--agl1-level", "transition"]
    )
    assert out.exit_code == 0, out.output
    assert re.fullmatch(
        r"wrote agl1@v1: (\d+) rows \(of \d+ calls; 3 unrewarded, \d+ rejected\), \d+ tokens, hash \w{8}\n",
        out.stdout,
    )
    (m,) = run_sql(wh, "SELECT rows, params FROM datasets").to_pylist()
    assert '"rules": "agl1"' in m["params"] and '"level": "transition"' in m["params"]
    ((folder, manifest),) = Storage(wh).dataset_versions("agl1")
    kv = pq.read_schema(folder / "train.parquet").metadata
    assert kv[b"tracebank.content_hash"] == manifest.content_hash.encode()
    assert kv[b"tracebank.dataset"] == b"agl1" and kv[b"tracebank.split"] == b"train"
    recipe = run.invoke(cli, [*base, "transform", "--dataset", "recipe"])
    assert recipe.exit_code == 0 and recipe.stdout.startswith("wrote recipe@v1: ")


def test_bad_flag_combinations_are_one_line_errors(wh, tmp_path):
    run = CliRunner()
    base = ["--warehouse", str(wh.root)]
    both = run.invoke(cli, [*base, "collect", "--store", "http://127.0.0.1:1", "--spool", str(tmp_path)])
    assert both.exit_code == 2 and both.stderr == "Error: give only one of --store URL and --spool DIR\n"
    missing = run.invoke(cli, [*base, "collect", "--spool", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "does not exist" in missing.stderr and missing.stderr.count("\n") == 1
    mixed = run.invoke(
        cli, [*base, "transform", "--dataset", "d", "--rules", "agl1", "--top-fraction", "0.5"]
    )
    assert mixed.exit_code == 2 and mixed.stderr == (
        "Error: --rules agl1 reproduces RolloutAdapter's rows; --top-fraction would change them "
        "(use the --agl1-* limits, or drop --rules agl1)\n"
    )


def test_store_url_of_an_agl_server_is_detected(agl1_server, wh):
    agl1_server.create_rollout("scenario:merge_logprobs", "cli1")
    agl1_server.set_state("cli1", "running", attempt_id="0")
    play_scenario(agl1_server, "cli1", "0", "merge_logprobs")
    agl1_server.set_state("cli1", "succeeded")
    out = CliRunner().invoke(
        cli,
        ["--warehouse", str(wh.root), "collect", "--store", agl1_server.url, "--agl-key", agl1_server.key],
    )
    assert out.exit_code == 0, out.output
    assert re.fullmatch(COLLECTED, out.stdout.splitlines()[0]).groups() == ("1", "3", "0")
