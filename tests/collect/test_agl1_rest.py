"""The REST reader: a live agl-server's finished rollouts into the spool, position kept between runs."""

from __future__ import annotations

import json
import time

import pytest
from tracebank.collect.agl1_rest import Agl1Rest, cursor_path, spool_from_server
from tracebank.collect.agl1_spool import read_spool
from tracebank.collect.errors import StoreRequestError, StoreUnreachableError

from tests.fixtures.agl1_server import Agent, play_scenario


def finish(server, rid: str, scenario: str = "merge_logprobs", state: str = "succeeded") -> None:
    server.create_rollout(f"scenario:{scenario}", rid)
    server.set_state(rid, "running", attempt_id="0")
    play_scenario(server, rid, "0", scenario)
    server.set_state(rid, state)


def test_reads_each_finished_rollout_once_across_runs(agl1_server, tmp_path):
    client = Agl1Rest(agl1_server.url, agl1_server.key)
    spool = tmp_path / "spool"
    finish(agl1_server, "r1")
    finish(agl1_server, "r2", state="failed")
    agl1_server.create_rollout("still queued", "r3")
    first = spool_from_server(client, spool)
    assert (first.spooled, first.missed, first.cursor) == (2, 0, 2)
    entries = {e.data["rollout_id"]: e for e in read_spool(spool)}
    assert set(entries) == {"r1", "r2"} and entries["r2"].data["state"] == "failed"
    assert entries["r1"].events() == agl1_server.events("r1", include_routed_experts=False)
    assert json.loads(cursor_path(spool, agl1_server.url).read_text())["after"] == 2

    again = spool_from_server(Agl1Rest(agl1_server.url, agl1_server.key), spool)
    assert (again.spooled, again.missed, again.cursor) == (0, 0, 2)

    finish(agl1_server, "r4")
    finish(agl1_server, "r5")
    agl1_server.request("DELETE", "/api/rollouts/r4")  # the trainer got to it first
    third = spool_from_server(client, spool)
    assert (third.spooled, third.missed, third.cursor) == (1, 1, 4)
    assert {e.data["rollout_id"] for e in read_spool(spool)} == {"r1", "r2", "r5"}


def test_a_restarted_server_resets_the_cursor(agl1_server, tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    cursor_path(spool, agl1_server.url).write_text(json.dumps({"url": agl1_server.url, "after": 50}))
    finish(agl1_server, "r1")
    result = spool_from_server(Agl1Rest(agl1_server.url, agl1_server.key), spool)
    assert result.reset and (result.spooled, result.cursor) == (1, 1)


def test_wrong_key_and_dead_server_are_one_line_errors(agl1_server, tmp_path):
    with pytest.raises(StoreRequestError, match="401"):
        spool_from_server(Agl1Rest(agl1_server.url, "wrong"), tmp_path)
    from tracebank.serve.process import free_port

    with pytest.raises(StoreUnreachableError, match="cannot reach agl-server"):
        spool_from_server(Agl1Rest(f"http://127.0.0.1:{free_port()}", ""), tmp_path)


def test_detects_a_10_server(agl1_server, store_url):
    assert Agl1Rest(agl1_server.url, agl1_server.key).is_agl1()
    assert not Agl1Rest(store_url).is_agl1()  # an agentlightning 0.3 `agl store`


def test_reads_while_an_agent_works(agl1_server, tmp_path):
    """Rollouts finishing during and between passes are each spooled exactly once."""
    client, spool = Agl1Rest(agl1_server.url, agl1_server.key), tmp_path / "spool"
    total = 0
    with Agent(agl1_server):
        for i in range(6):
            agl1_server.create_rollout(f"scenario:no_merge {i}", f"w{i}")
            total += spool_from_server(client, spool).spooled
        for _ in range(100):
            total += spool_from_server(client, spool).spooled
            if total == 6:
                break
            time.sleep(0.1)
    assert total == 6 and len(read_spool(spool)) == 6
