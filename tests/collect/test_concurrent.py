"""Two collects into one warehouse at once archive each attempt once (issue 12, point 2), whatever
their sources (issue 17)."""

from __future__ import annotations

import threading

import pytest
from tracebank.collect import CollectConfig, collect
from tracebank.collect.collector import collect_claim
from tracebank.warehouse.claims import Owner, release, try_claim
from tracebank.warehouse.query import run_sql
from tracebank.warehouse.storage import Storage

from tests.collect.helpers import fill_spool, fill_url, start_cli


@pytest.fixture(scope="module")
def filled_store(store_url):
    fill_url(store_url, 120, seed=5)
    return store_url


def _waits(notes: list[str]):
    """An on_event that keeps what each WaitingForWarehouse event says."""
    from tracebank.core.events import WaitingForWarehouse

    return lambda event: notes.append(event.note) if isinstance(event, WaitingForWarehouse) else None


def test_two_collect_runs_at_once_store_everything_once(filled_store, wh):
    results, notes, errors = [], [], []
    gate = threading.Barrier(2)

    def one() -> None:
        gate.wait()
        try:
            results.append(collect(filled_store, wh, CollectConfig(), on_event=_waits(notes)))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert errors == []
    committed = [r for r in results if r.collection_id is not None]
    assert len(committed) == 1 and committed[0].counts["rollouts"] == 120
    assert [r.counts["skipped"] for r in results if r.collection_id is None] == [120]
    me = Owner.current()
    assert notes == [f"waiting for collect (pid {me.pid} on {me.host}) to finish with this warehouse"]
    counts = run_sql(
        wh,
        "SELECT count(*) n, count(DISTINCT span_id) spans, "
        "(SELECT count(*) FROM rollouts) r, (SELECT count(DISTINCT rollout_id) FROM rollouts) dr FROM spans",
    ).to_pylist()[0]
    assert counts["n"] == counts["spans"] and counts["r"] == counts["dr"] == 120
    assert len(Storage(wh).collections()) == 1
    assert collect_claim(wh).holder() is None


def test_a_collect_waits_for_one_holding_the_warehouse_and_says_so(filled_store, wh):
    holder = Owner(Owner.current().pid, Owner.current().host, Owner.current().start, "collect")
    path = collect_claim(wh.init())
    assert try_claim(path, holder) is None
    threading.Timer(1.0, release, (path, holder)).start()
    notes: list[str] = []
    result = collect(filled_store, wh, CollectConfig(), on_event=_waits(notes))
    assert len(notes) == 1 and notes[0].startswith("waiting for collect (pid ")
    assert result.counts["rollouts"] == 120


def test_a_collect_killed_while_holding_the_warehouse_does_not_block_the_next(filled_store, wh):
    import subprocess
    import sys

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path = collect_claim(wh.init())
    assert try_claim(path, Owner(dead.pid, Owner.current().host, "1", "collect")) is None
    notes: list[str] = []
    result = collect(filled_store, wh, CollectConfig(), on_event=_waits(notes))
    assert notes == [] and result.counts["rollouts"] == 120


def test_duplicates_from_an_older_warehouse_are_reported_and_repaired(store_url, tmp_path):
    """Two collects that raced before collect took turns: the second collection repeats the first."""
    import shutil

    from click.testing import CliRunner
    from tracebank.warehouse.location import Warehouse

    from tracebank.cli.main import cli

    fill_url(store_url, 30, seed=21)
    wh = Warehouse(tmp_path / "wh").init()
    other = Warehouse(tmp_path / "other").init()
    first = collect(store_url, wh, CollectConfig())
    fill_url(store_url, 7, seed=22)  # the racing collect also saw 7 newer rollouts
    raced = collect(store_url, other, CollectConfig())
    shutil.move(str(raced.folder), str(wh.collections_dir / raced.collection_id))
    total = first.counts["rollouts"] + 7

    def run(*extra):
        return CliRunner().invoke(cli, ["--warehouse", str(wh.root), "collect", "--store", store_url, *extra])

    warned = run("--no-silver")
    assert warned.exit_code == 0
    assert f"Warning: {first.counts['rollouts']} attempts are stored more than once" in warned.stderr
    assert "`tracebank repair-duplicates` keeps one copy of each" in warned.stderr

    repaired = CliRunner().invoke(cli, ["--warehouse", str(wh.root), "repair-duplicates"])
    assert repaired.exit_code == 0, repaired.output
    lines = repaired.stdout.splitlines()
    assert lines[0].startswith(f"repaired {raced.collection_id}: replaced by c")
    assert lines[1] == f"repair: removed {first.counts['rollouts']} duplicate attempt(s) from 1 collection(s)"
    counts = run_sql(
        wh,
        "SELECT (SELECT count(*) FROM rollouts) r, (SELECT count(DISTINCT rollout_id) FROM rollouts) dr, "
        "(SELECT count(*) FROM attempts) a, count(*) n, count(DISTINCT span_id) ds FROM spans",
    ).to_pylist()[0]
    assert counts["r"] == counts["dr"] == counts["a"] == total
    assert counts["n"] == counts["ds"]
    again = run("--no-silver")
    assert "stored more than once" not in again.stderr


def _wait_note(stream) -> str:
    """The first line of a collect's stderr that says whom it waits for ('' if it never did)."""
    for line in stream:  # off a terminal, each progress line starts with the seconds elapsed
        if "] waiting for " in line:
            return line.partition("] ")[2].strip()
    return ""


def test_a_spool_collect_and_a_store_collect_at_once_take_turns(fresh_store_url, wh, tmp_path):
    """Every source takes the one collect claim: a 1.0 spool and a 0.3 store collected into one
    warehouse at once commit one after the other, and no attempt is stored twice."""
    import datetime as dt

    from tracebank.collect.agl1_spool import spool_files

    stored = fill_url(fresh_store_url, 60, seed=41)
    spool = tmp_path / "spool"
    spooled = fill_spool(spool, 40, prefix="spool")
    me = Owner.current()
    test = Owner(me.pid, me.host, me.start, "the test")
    path = collect_claim(wh.init())
    assert try_claim(path, test) is None  # both collects start while the warehouse is taken
    base = ["--warehouse", str(wh.root), "collect", "--no-silver"]
    procs = [start_cli(*base, "--store", fresh_store_url), start_cli(*base, "--spool", str(spool))]
    try:
        notes = [_wait_note(proc.stderr) for proc in procs]
    finally:
        release(path, test)
    assert notes == [f"waiting for the test (pid {me.pid} on {me.host}) to finish with this warehouse"] * 2
    outs = [proc.communicate(timeout=300) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outs
    assert all(out.startswith("collected c") for out, _ in outs), outs

    manifests = [m for _, m in Storage(wh).collections()]
    first, second = sorted(manifests, key=lambda m: dt.datetime.fromisoformat(m.created_at))
    # A collect creates its collection once it holds the claim and lets go only after committing.
    assert dt.datetime.fromisoformat(first.finished_at) <= dt.datetime.fromisoformat(second.created_at)
    assert sorted([first.source or "agl03", second.source or "agl03"]) == ["agl03", "agl1"]
    counts = run_sql(
        wh,
        "SELECT count(*) n, count(DISTINCT (rollout_id, attempt_id)) pairs, "
        "count(*) FILTER (WHERE rollout_id LIKE 'spool%') spooled FROM attempts",
    ).to_pylist()[0]
    total = len(stored) + len(spooled)
    assert counts == {"n": total, "pairs": total, "spooled": len(spooled)}
    assert spool_files(spool) == [] and collect_claim(wh).holder() is None
