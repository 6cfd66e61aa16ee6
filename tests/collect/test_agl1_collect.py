"""collect for 1.0: the spool becomes one collection, idempotently, and the same SQL reads both sources."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time

import pytest
from tracebank.collect import Agl1ServerSource, SpoolSource, agl1_read, collect, server_source
from tracebank.collect.agl1_rest import Agl1Rest, spool_from_server
from tracebank.collect.agl1_spool import spool_files
from tracebank.collect.config import CollectConfig
from tracebank.collect.silver import build_silver
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.query import run_sql

from tests.collect.helpers import fill_spool
from tests.fixtures.agl1_server import SCENARIOS, play_scenario
from tests.fixtures.bronze import commit_collection, synthetic_rollouts

BOTH = CollectConfig(statuses=("succeeded", "failed"))


def sql(wh, text):
    return run_sql(wh, text).to_pylist()


def test_a_trainer_round_is_all_in_the_warehouse(agl1_round, wh, tmp_path):
    round_spool, result, server = agl1_round
    spool = tmp_path / "spool"
    shutil.copytree(round_spool, spool)
    done = collect(SpoolSource(spool), wh, BOTH)
    completed = result["completed"]
    assert done.committed and done.counts["rollouts"] == len(completed)
    assert spool_files(spool) == []  # committed, so no longer spooled
    n_events = sum(len(c["events"]) for c in completed)
    assert sql(wh, "SELECT count(*) AS n FROM events") == [{"n": n_events}]
    assert sql(wh, "SELECT count(DISTINCT rollout_id) AS n FROM rollouts") == [{"n": len(completed)}]
    states = sql(wh, "SELECT status, count(*) AS n FROM rollouts GROUP BY status ORDER BY status")
    assert states == [{"status": "failed", "n": 2}, {"status": "succeeded", "n": len(completed) - 2}]
    build_silver(wh, done.collection_id)
    calls = sql(
        wh, "SELECT count(*) AS n, count(DISTINCT rollout_id) AS r FROM llm_calls WHERE source = 'agl1'"
    )
    assert calls == [
        {
            "n": sum(e["event_type"] == "model_request" for c in completed for e in c["events"]),
            "r": len(completed),
        }
    ]
    again = collect(SpoolSource(spool), wh, BOTH)
    assert not again.committed


def test_rerun_after_a_commit_whose_spool_cleanup_died(agl1_round, wh, tmp_path, monkeypatch):
    spool = tmp_path / "spool"
    shutil.copytree(agl1_round[0], spool)
    n = len(spool_files(spool))

    def die(entries):
        raise KeyboardInterrupt  # killed right after the manifest was committed

    monkeypatch.setattr(agl1_read, "remove_entries", die)
    with pytest.raises(KeyboardInterrupt):
        collect(SpoolSource(spool), wh, BOTH)
    monkeypatch.undo()
    rerun = collect(SpoolSource(spool), wh, BOTH)
    assert not rerun.committed and rerun.counts["skipped"] == n and spool_files(spool) == []
    assert sql(wh, "SELECT count(*) AS n, count(DISTINCT rollout_id) AS d FROM rollouts") == [
        {"n": n, "d": n}
    ]


KILLER = """
import sys
from pathlib import Path
from tracebank.collect import CollectConfig, SpoolSource, collect
from tracebank.warehouse.location import Warehouse
print("start", flush=True)
collect(SpoolSource(Path(sys.argv[1])), Warehouse(Path(sys.argv[2])), CollectConfig())
"""


@pytest.mark.parametrize("delay", [0.0, 0.4, 0.9, 1.5, 3.0])
def test_collect_killed_mid_spool_and_rerun_loses_and_duplicates_nothing(tmp_path, delay):
    spool, root = tmp_path / "spool", tmp_path / "wh"
    ids = fill_spool(spool, 150)
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLER, str(spool), str(root)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "start"
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    wh = Warehouse(root).init()
    collect(SpoolSource(spool), wh, CollectConfig())
    got = sql(wh, "SELECT rollout_id, count(*) AS n FROM rollouts GROUP BY rollout_id ORDER BY rollout_id")
    assert got == [{"rollout_id": rid, "n": 1} for rid in ids]
    assert sql(wh, "SELECT count(*) AS n FROM events") == [{"n": 3 * len(ids)}]
    assert spool_files(spool) == []


def test_status_filter_leaves_the_rest_in_the_spool(agl1_round, wh, tmp_path):
    spool = tmp_path / "spool"
    shutil.copytree(agl1_round[0], spool)
    first = collect(SpoolSource(spool), wh)  # the default: succeeded only
    assert first.counts["filtered_out"] == 2 and len(spool_files(spool)) == 2
    second = collect(SpoolSource(spool), wh, CollectConfig(statuses=("failed",)))
    assert second.counts["rollouts"] == 2 and spool_files(spool) == []


def test_the_same_sql_reads_both_sources(agl1_round, wh, tmp_path):
    spans, rollouts = synthetic_rollouts(3, seed=1)
    old = commit_collection(wh, spans, rollouts=rollouts)
    spool = tmp_path / "spool"
    shutil.copytree(agl1_round[0], spool)
    new = collect(SpoolSource(spool), wh, BOTH).collection_id
    for cid in (old, new):
        build_silver(wh, cid)
    query = """
        SELECT c.collection_id, count(*) AS calls, sum(c.response_len) > 0 AS tokens,
               count(DISTINCT r.rollout_id) AS rewarded
        FROM llm_calls c LEFT JOIN rewards r USING (collection_id, rollout_id, attempt_id)
        WHERE c.reject_reason IS NULL GROUP BY 1 ORDER BY 1
    """
    got = {r["collection_id"]: r for r in sql(wh, query)}
    assert set(got) == {old, new} and all(
        r["calls"] > 0 and r["tokens"] and r["rewarded"] > 0 for r in got.values()
    )
    text = sql(
        wh,
        "SELECT count(*) AS n FROM messages WHERE role = 'user' GROUP BY collection_id ORDER BY 1",
    )
    assert len(text) == 2 and all(r["n"] > 0 for r in text)


def test_collect_from_a_live_server_over_rest(agl1_server, wh):
    for i, name in enumerate(["merge_logprobs", "no_merge"]):
        rid = f"live{i}"
        agl1_server.create_rollout(f"scenario:{name}", rid)
        agl1_server.set_state(rid, "running", attempt_id="0")
        play_scenario(agl1_server, rid, "0", name)
        agl1_server.set_state(rid, "succeeded")
    server = Agl1ServerSource(agl1_server.url, agl1_server.key)
    first = collect(server, wh)
    assert first.committed and first.counts["rollouts"] == 2 and first.counts["missed"] == 0
    second = collect(server, wh)
    assert not second.committed and second.counts["rollouts"] == 0
    n = len(SCENARIOS["merge_logprobs"][0]) + len(SCENARIOS["no_merge"][0])
    assert sql(wh, "SELECT count(*) AS n FROM events WHERE event_type = 'model_request'") == [{"n": n}]
    assert server_source(agl1_server.url, agl1_server.key) == server


def test_the_same_attempt_in_two_spool_files_is_committed_once(wh, tmp_path):
    spool = tmp_path / "spool"
    (rid,) = fill_spool(spool, 1)
    (path,) = spool_files(spool)
    shutil.copy(path, spool / f"copy-{path.name}")  # e.g. a spool folder copied back in by hand
    result = collect(SpoolSource(spool), wh)
    assert result.counts["attempts"] == result.counts["rollouts"] == 1
    attempts = sql(wh, "SELECT rollout_id, count(*) AS n FROM attempts GROUP BY 1")
    assert attempts == [{"rollout_id": rid, "n": 1}]
    assert sql(wh, "SELECT count(*) AS n FROM events") == [{"n": 3}]
    assert spool_files(spool) == []  # both copies are in the warehouse now


def test_a_spool_skips_what_a_server_collect_committed(agl1_server, wh, tmp_path):
    for rid in ("both0", "both1"):
        agl1_server.create_rollout("scenario:no_merge", rid)
        agl1_server.set_state(rid, "running", attempt_id="0")
        play_scenario(agl1_server, rid, "0", "no_merge")
        agl1_server.set_state(rid, "succeeded")
    hook_spool = tmp_path / "hook-spool"  # what the trainer's hook spooled of the same rollouts
    assert spool_from_server(Agl1Rest(agl1_server.url, agl1_server.key), hook_spool).spooled == 2
    assert collect(Agl1ServerSource(agl1_server.url, agl1_server.key), wh).counts["rollouts"] == 2
    from_spool = collect(SpoolSource(hook_spool), wh)
    assert not from_spool.committed and from_spool.counts["skipped"] == 2
    assert spool_files(hook_spool) == []
    attempts = sql(wh, "SELECT count(*) AS n, count(DISTINCT rollout_id) AS d FROM attempts")
    assert attempts == [{"n": 2, "d": 2}]
