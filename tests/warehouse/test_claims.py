"""Exclusive claims over any byte store: one holder at a time, dead holders broken, live and
other hosts' ones respected. The same tests run on a folder and on a real S3 server (moto)."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
import threading
import time

import pytest
from tracebank.warehouse.bytestore import LocalStore
from tracebank.warehouse.claims import Claim, Owner, claimed, output_claim, release, try_claim
from tracebank.warehouse.s3store import S3Store


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture(params=["local", "s3"])
def claim(request, tmp_path) -> Claim:
    if request.param == "local":
        return Claim(LocalStore(tmp_path / "wh"), "claims/x")
    return Claim(S3Store(request.getfixturevalue("s3_bucket"), "wh"), "claims/x")


def _holder_record(claim: Claim) -> dict:
    gens = [f.path for f in claim.store.walk(claim.key) if "." not in f.path.rpartition("/")[2]]
    return json.loads(claim.store.get(max(gens)))


def test_a_claim_is_exclusive_until_released(claim):
    me = Owner.current("first")
    assert try_claim(claim, me) is None
    holder = try_claim(claim, Owner.current("second"))
    assert holder is not None and holder.what == "first" and holder.alive() is True
    release(claim, me)
    assert claim.holder() is None
    assert try_claim(claim, Owner.current("second")) is None
    assert _holder_record(claim)["what"] == "second"


def test_a_claim_whose_process_is_gone_is_broken(claim):
    dead = Owner(_dead_pid(), Owner.current().host, "1", "killed collect")
    assert try_claim(claim, dead) is None
    assert dead.alive() is False and claim.holder() is None
    assert try_claim(claim, Owner.current("next")) is None
    assert _holder_record(claim)["what"] == "next"


def test_a_reused_pid_does_not_keep_a_claim():
    me = Owner.current()
    assert Owner(me.pid, me.host, "not-my-start-time").alive() is False


def test_a_claim_of_another_host_is_respected(claim):
    remote = Owner(1, "some-other-host", "1", "collect elsewhere")
    assert try_claim(claim, remote) is None
    holder = try_claim(claim, Owner.current())
    assert holder is not None and holder.host == "some-other-host" and holder.alive() is None


def test_an_unreadable_generation_is_not_a_holder(tmp_path):
    store = LocalStore(tmp_path / "wh")
    claim = Claim(store, "claims/x")
    store.put("claims/x/0000000001", b"{not json")
    assert claim.holder() is None
    assert try_claim(claim, Owner.current("next")) is None
    assert _holder_record(claim)["what"] == "next"


HOSTILE_OWNERS = [
    {"pid": 10**30, "host": "H", "start": None},  # os.kill raised OverflowError: a traceback
    {"pid": -1, "host": "H", "start": None},  # kill(-1, 0) asks about every process
    {"pid": 0, "host": "H", "start": None},  # kill(0, 0) asks about the process group
    {"pid": True, "host": "H", "start": None},
    {"pid": "12", "host": "H", "start": None},
    {"pid": 12, "host": ["H"], "start": None},
    {"pid": 12, "host": "H", "start": {"x": 1}},
    [12, "H"],
]


@pytest.mark.parametrize("owner", HOSTILE_OWNERS, ids=range(len(HOSTILE_OWNERS)))
def test_a_generation_naming_no_real_process_is_not_a_holder(tmp_path, owner):
    import socket

    if isinstance(owner, dict):
        owner = {**owner, "host": socket.gethostname() if owner["host"] == "H" else owner["host"]}
    store = LocalStore(tmp_path / "wh")
    claim = Claim(store, "claims/x")
    store.put("claims/x/0000000001", json.dumps(owner).encode())
    assert claim.holder() is None
    assert try_claim(claim, Owner.current("next")) is None
    assert _holder_record(claim)["what"] == "next"


@pytest.mark.parametrize("owner", HOSTILE_OWNERS, ids=range(len(HOSTILE_OWNERS)))
def test_a_run_record_naming_no_real_process_reads_in_every_command(tmp_path, owner):
    """A planted run record's owner is data: `runs list`, `runs show` and `gc` read it without a
    traceback, and a run whose owner cannot be read is left as it says (it may still run)."""
    import socket

    from click.testing import CliRunner
    from tracebank.warehouse.location import Warehouse

    from tracebank.cli.main import cli

    if isinstance(owner, dict):
        owner = {**owner, "host": socket.gethostname() if owner["host"] == "H" else owner["host"]}
    wh = Warehouse(tmp_path / "wh").init()
    record = {
        "run_id": "r1",
        "status": "running",
        "dataset": "d@v1",
        "content_hash": None,
        "base_model": "m",
        "backend": "trl",
        "output_dir": str(tmp_path / "out"),
        "save": "lora",
        "hyperparameters": {},
        "libraries": {},
        "started_at": "2026-01-01T00:00:00+00:00",
        "owner": owner,
    }
    (wh.root / "runs" / "r1").mkdir(parents=True)
    (wh.root / "runs" / "r1" / "run.json").write_text(json.dumps(record))
    for args in (["runs", "list"], ["runs", "show", "r1"], ["gc", "--dry-run"], ["gc"]):
        out = CliRunner().invoke(cli, ["-w", str(wh.root), *args])
        assert out.exception is None or isinstance(out.exception, SystemExit), (args, out.output)
        assert "Traceback" not in out.output
    shown = CliRunner().invoke(cli, ["-w", str(wh.root), "runs", "show", "r1", "--format", "json"])
    if isinstance(owner, dict):
        assert json.loads(shown.stdout)["status"] == "running"
    else:  # not an object: the whole record is damage, left out with a warning
        assert shown.exit_code == 1 and "not a valid run record" in shown.stderr


def test_a_waiting_claimer_says_whom_it_waits_for_once(claim):
    first = Owner(Owner.current().pid, "this-host-as-first", None, "first")
    assert try_claim(claim, first) is None
    told = []
    threading.Timer(0.8, release, (claim, first)).start()
    t0 = time.monotonic()
    with claimed(claim, Owner.current("second"), wait=True, on_wait=told.append):
        assert _holder_record(claim)["what"] == "second"
    assert time.monotonic() - t0 >= 0.7
    assert [o.what for o in told] == ["first"]
    assert claim.holder() is None


def test_clear_if_free_leaves_a_held_claim_and_removes_a_free_one(tmp_path):
    claim = Claim(LocalStore(tmp_path / "wh"), "claims/x")
    me = Owner.current("holder")
    assert try_claim(claim, me) is None
    assert claim.clear_if_free(older_than=0.0) == []
    release(claim, me)
    assert sorted(claim.clear_if_free(older_than=0.0)) == [
        "claims/x/0000000001",
        "claims/x/0000000001.released",
    ]
    assert not (tmp_path / "wh" / "claims" / "x").exists()


def test_an_output_claim_lives_in_the_warehouse_named_by_the_path(tmp_path):
    from tracebank.warehouse.location import Warehouse

    wh = Warehouse(tmp_path / "wh").init()
    claim = output_claim(wh, tmp_path / "models" / "m1")
    assert try_claim(claim, Owner.current("train")) is None
    assert (
        try_claim(output_claim(wh, tmp_path / "models" / ".." / "models" / "m1"), Owner.current()) is not None
    )
    assert claim.key.startswith("claims/output-") and not (tmp_path / "models").exists()


def _race(root: str, start: float, results) -> None:
    from pathlib import Path

    while time.time() < start:
        time.sleep(0.001)
    won = try_claim(Claim(LocalStore(Path(root)), "claims/x"), Owner.current("racer")) is None
    results.put(won)
    time.sleep(0.5)  # hold it while the others try


def test_only_one_of_many_racing_processes_wins(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    start = time.time() + 1.5
    procs = [ctx.Process(target=_race, args=(str(tmp_path / "wh"), start, results)) for _ in range(6)]
    for p in procs:
        p.start()
    wins = [results.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert sorted(wins) == [False] * 5 + [True]


def test_a_release_keeps_only_the_newest_generation(claim):
    me = Owner.current("collect")
    for _ in range(3):
        assert try_claim(claim, me) is None
        release(claim, me)
    names = sorted(f.path.rpartition("/")[2] for f in claim.store.walk(claim.key))
    assert names == ["0000000003", "0000000003.released"]
    assert try_claim(claim, me) is None and _holder_record(claim)["what"] == "collect"
