"""Exclusive claims: one holder at a time, dead holders broken, live and remote ones respected."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
import threading
import time

from tracebank.warehouse.claims import Owner, claimed, read_claim, release, try_claim


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_claim_is_exclusive_until_released(tmp_path):
    path = tmp_path / "x.claim"
    me = Owner.current("first")
    assert try_claim(path, me) is None
    holder = try_claim(path, Owner.current("second"))
    assert holder is not None and holder.what == "first" and holder.alive() is True
    release(path, me)
    assert not path.exists()
    assert try_claim(path, Owner.current("second")) is None


def test_a_claim_whose_process_is_gone_is_broken(tmp_path):
    path = tmp_path / "x.claim"
    dead = Owner(_dead_pid(), Owner.current().host, "1", "killed collect")
    assert try_claim(path, dead) is None
    assert dead.alive() is False
    assert try_claim(path, Owner.current("next")) is None
    held = read_claim(path)
    assert held is not None and held[0].what == "next"


def test_a_reused_pid_does_not_keep_a_claim(tmp_path):
    me = Owner.current()
    assert Owner(me.pid, me.host, "not-my-start-time").alive() is False


def test_a_claim_of_another_host_is_respected(tmp_path):
    path = tmp_path / "x.claim"
    remote = Owner(1, "some-other-host", "1", "collect elsewhere")
    assert try_claim(path, remote) is None
    holder = try_claim(path, Owner.current())
    assert holder is not None and holder.host == "some-other-host" and holder.alive() is None


def test_a_waiting_claimer_says_whom_it_waits_for_once(tmp_path):
    path = tmp_path / "x.claim"
    first = Owner(Owner.current().pid, Owner.current().host, Owner.current().start, "first")
    assert try_claim(path, first) is None
    told = []
    threading.Timer(0.8, release, (path, first)).start()
    t0 = time.monotonic()
    with claimed(path, Owner.current("second"), wait=True, on_wait=told.append):
        assert json.loads(path.read_text())["what"] == "second"
    assert time.monotonic() - t0 >= 0.7
    assert [o.what for o in told] == ["first"]
    assert not path.exists()


def _race(path: str, start: float, results) -> None:
    from pathlib import Path

    while time.time() < start:
        time.sleep(0.001)
    won = try_claim(Path(path), Owner.current("racer")) is None
    results.put(won)
    time.sleep(0.5)  # hold it while the others try


def test_only_one_of_many_racing_processes_wins(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    start = time.time() + 1.5
    procs = [ctx.Process(target=_race, args=(str(tmp_path / "x.claim"), start, results)) for _ in range(6)]
    for p in procs:
        p.start()
    wins = [results.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert sorted(wins) == [False] * 5 + [True]
