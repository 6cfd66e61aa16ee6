"""A collect killed midway, and readers running while a collect writes (real subprocesses)."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from click.testing import CliRunner
from tracebank.warehouse.layout import MANIFEST
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.storage import Storage

from tests.collect.helpers import fill_url, run_cli, start_cli, wait_for
from tracebank.cli.main import cli

N_ROLLOUTS = 200
SPANS_EACH = 13  # four proxied calls of three spans, and a reward
ROWS_PER_FILE = "100"


@pytest.fixture(scope="module")
def big_store(store_url):
    """A store with enough spans that collect writes many files before it commits."""
    fill_url(store_url, N_ROLLOUTS, seed=3, n_calls=4)
    return store_url


def _data_files(wh: Warehouse) -> list:
    """Finished (renamed) data files in uncommitted collection folders."""
    out = []
    for folder in wh.collections_dir.glob("c*"):
        if not (folder / MANIFEST).exists():
            out += [p for p in folder.glob("spans-*.parquet") if ".tmp-" not in p.name]
    return out


def _sql(wh: Warehouse, statement: str) -> list:
    done = run_cli("--warehouse", str(wh.root), "sql", statement, "--format", "jsonl")
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_sigkill_midway_then_rerun_leaves_one_copy_of_every_span(big_store, wh):
    proc = start_cli(
        "--warehouse", str(wh.root), "collect", "--store", big_store, "--rows-per-file", ROWS_PER_FILE
    )
    try:
        # The real midpoint: a data file is on disk, the fetching goes on, nothing is committed.
        assert wait_for(lambda: bool(_data_files(wh)), timeout=60), proc.communicate()
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(10)
    assert proc.returncode == -signal.SIGKILL
    [dead] = list(wh.collections_dir.glob("c*"))
    assert not (dead / MANIFEST).exists() and list(dead.glob("spans-*.parquet"))
    assert Storage(wh).collections() == []
    assert _sql(wh, "SELECT count(*) AS n FROM spans") == [{"n": 0}]

    # the rerun and the check after it run in this process: importing agentlightning anew in a
    # subprocess costs seconds and proves nothing more
    rerun = CliRunner().invoke(cli, ["--warehouse", str(wh.root), "collect", "--store", big_store])
    assert rerun.exit_code == 0, rerun.output
    total = N_ROLLOUTS * SPANS_EACH
    assert rerun.stdout.startswith("collected c")
    assert f"{N_ROLLOUTS} new rollouts, {total} spans, 0 skipped" in rerun.stdout
    assert _sql(
        wh,
        "SELECT count(*) AS n, count(DISTINCT span_id) AS d, count(DISTINCT collection_id) AS c FROM spans",
    ) == [{"n": total, "d": total, "c": 1}]
    assert _sql(wh, "SELECT count(*) AS n FROM attempts") == [{"n": N_ROLLOUTS}]
    again = CliRunner().invoke(cli, ["--warehouse", str(wh.root), "collect", "--store", big_store])
    assert again.stdout.startswith(f"nothing new: 0 new rollouts, 0 spans, {N_ROLLOUTS} skipped")


def test_sql_runs_while_a_collect_writes(big_store, wh):
    wh.init()
    # --concurrency 1 only stretches the run so several reads fit inside it.
    proc = start_cli(
        "--warehouse",
        str(wh.root),
        "collect",
        "--store",
        big_store,
        "--rows-per-file",
        "20",
        "--concurrency",
        "1",
    )
    total = N_ROLLOUTS * SPANS_EACH
    reads_during_write = 0
    log = []
    try:
        assert wait_for(lambda: bool(_data_files(wh)), timeout=60)
        while proc.poll() is None:
            # uncommitted data files on disk and the writer alive: the read starts mid-write
            mid_write = bool(_data_files(wh)) and proc.poll() is None
            during = run_cli(
                "--warehouse", str(wh.root), "sql", "SELECT count(*) AS n FROM spans", "--format", "jsonl"
            )
            assert during.returncode == 0, during.stderr
            # a reader sees all of the collection or none of it, never a part
            assert json.loads(during.stdout)["n"] in (0, total)
            reads_during_write += mid_write
            log.append((round(time.monotonic(), 2), mid_write, during.stdout.strip()))
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert reads_during_write >= 1, (log, out, err)
    assert _sql(wh, "SELECT count(*) AS n FROM spans") == [{"n": total}]
