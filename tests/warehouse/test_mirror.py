"""A warehouse on a real S3 server (moto) seen from two machines' mirrors (issue 13).

"Machines" are mirror folders (``TRACEBANK_CACHE_DIR``): what one commits, retires or replaces,
the other sees on its next read; what the store does not vouch for (an altered object) is refused.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
import time

import pytest
from click.testing import CliRunner
from tracebank.collect.silver import build_silver
from tracebank.core.errors import CorruptFileError
from tracebank.warehouse.backends import open_warehouse
from tracebank.warehouse.claims import Owner, try_claim, warehouse_claim
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.mirror import MirrorStore
from tracebank.warehouse.storage import Storage

from tests.fixtures.bronze import commit_collection, synthetic_rollouts
from tracebank.cli.main import cli


@pytest.fixture
def machines(tmp_path, monkeypatch, s3_bucket):
    """``on("a")`` -> this warehouse as machine ``a`` sees it (its own mirror folder)."""
    location = f"s3://{s3_bucket}/shared/wh"

    def on(name: str) -> Warehouse:
        monkeypatch.setenv("TRACEBANK_CACHE_DIR", str(tmp_path / f"machine-{name}"))
        return open_warehouse(location)

    on("a").init()
    return on


def _commit(wh: Warehouse, cid: str, seed: int = 0) -> None:
    spans, rollouts = synthetic_rollouts(4, seed=seed)
    commit_collection(wh, spans, rollouts=rollouts, collection_id=cid)


def _ids(wh: Warehouse) -> list[str]:
    return [folder.name for folder, _ in Storage(wh).collections()]


def test_the_mirror_lives_in_the_cache_and_the_store_holds_the_truth(machines, s3_bucket, tmp_path):
    a = machines("a")
    assert a.root == tmp_path / "machine-a" / "warehouses" / "s3" / s3_bucket / "shared" / "wh"
    assert a.location == f"s3://{s3_bucket}/shared/wh"
    _commit(a, "c1")
    b = machines("b")
    assert not b.root.exists() or not (b.root / "collections").exists()
    assert _ids(b) == ["c1"]
    folder = b.root / "collections" / "c1"
    assert not list(folder.glob("*.parquet"))  # listed only: no data file came
    [(_, manifest)] = Storage(b).collections()
    [spans] = Storage(b).files_of(folder, manifest, "spans")  # a reader asks: that table's file comes
    assert spans.exists() and sorted(p.name for p in folder.glob("*.parquet")) == ["spans-0000.parquet"]


def test_a_retired_collection_goes_from_every_mirror(machines):
    a = machines("a")
    _commit(a, "c1")
    _commit(a, "c2", seed=1)
    assert _ids(machines("b")) == ["c1", "c2"]
    a = machines("a")
    Storage(a).retire_collection(a.collection_dir("c1"))
    assert _ids(machines("b")) == ["c2"]


def test_a_replaced_silver_cache_reaches_every_mirror(machines):
    a = machines("a")
    _commit(a, "c1")
    first = build_silver(a, "c1")
    b = machines("b")
    assert Storage(b).current_silver("c1") == first
    a = machines("a")
    second = build_silver(a, "c1", force=True)
    assert second.files != first.files
    b = machines("b")
    assert Storage(b).current_silver("c1") == second
    assert Storage(b).silver_table("c1", "llm_calls").num_rows == second.counts["llm_calls"]


def test_an_altered_object_is_refused_in_one_line(machines, s3_bucket):
    import boto3

    _commit(machines("a"), "c1")
    key = "shared/wh/collections/c1/spans-0000.parquet"
    s3 = boto3.client("s3")
    body = bytearray(s3.get_object(Bucket=s3_bucket, Key=key)["Body"].read())
    body[len(body) // 2] ^= 0xFF  # same size, other bytes
    s3.put_object(Bucket=s3_bucket, Key=key, Body=bytes(body))
    b = machines("b")
    [(folder, manifest)] = Storage(b).collections()
    with pytest.raises(CorruptFileError, match="does not match its manifest"):
        Storage(b).files_of(folder, manifest, "spans")
    assert not (folder / "spans-0000.parquet").exists()  # nothing unverified lands in the mirror
    other = CliRunner().invoke(cli, ["--warehouse", b.location, "sql", "SELECT count(*) n FROM attempts"])
    assert other.exit_code == 0  # only the altered object's table fails
    out = CliRunner().invoke(cli, ["--warehouse", b.location, "sql", "SELECT count(*) FROM spans"])
    assert out.exit_code == 1
    assert out.stderr.splitlines() == [
        f"Error: table spans: committed file s3://{s3_bucket}/shared/wh/collections/c1/spans-0000.parquet "
        "does not match its manifest (size or sha256) (run `tracebank verify` to see every damaged file)"
    ]


def test_an_unreachable_store_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEBANK_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    out = CliRunner().invoke(cli, ["--warehouse", "s3://nowhere/wh", "sql", "SELECT 1"])
    assert out.exit_code == 1
    [line] = out.stderr.splitlines()
    assert line.startswith("Error: cannot reach the warehouse at s3://nowhere/wh: Could not connect")
    assert line.endswith(
        "(check the bucket and the AWS_* settings (endpoint, keys, region) this process sees)"
    )


def test_two_machines_get_distinct_version_numbers(machines):
    a, b = machines("a"), machines("b")
    got = [Storage(a).reserve_version("ds")[0], Storage(b).reserve_version("ds")[0]]
    assert got == [1, 2]
    Storage(b).abandon_version(b.version_dir("ds", 2))  # given back: the next writer takes it
    assert Storage(a).reserve_version("ds")[0] == 2


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_remote_claim_respects_a_live_holder_and_breaks_a_dead_ones(machines):
    wh = machines("a")
    claim = warehouse_claim(wh, "collect")
    assert isinstance(claim.store, MirrorStore)
    me = Owner.current("collect")
    parent = Owner(os.getppid(), me.host, None, "another collect")
    assert try_claim(claim, parent) is None
    assert try_claim(claim, me) == parent  # alive on this host: respected
    claim.release(parent)
    assert try_claim(claim, me) is None
    claim.release(me)
    dead = Owner(_dead_pid(), me.host, None, "a killed collect")
    assert try_claim(claim, dead) is None
    assert try_claim(claim, me) is None  # its process is gone: broken
    elsewhere = Owner(1, "another-host", None, "a collect elsewhere")
    claim.release(me)
    assert try_claim(claim, elsewhere) is None
    assert try_claim(claim, me) == elsewhere  # another host's claim cannot be judged: respected


def test_racing_claimers_exactly_one_wins(machines):
    claim = warehouse_claim(machines("a"), "collect")
    owners = [Owner(1000 + i, f"host-{i}", None, f"writer {i}") for i in range(8)]
    results: list[object] = [None] * 8
    start = threading.Barrier(8)

    def race(i: int) -> None:
        start.wait()
        results[i] = try_claim(claim, owners[i])

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [owners[i] for i, r in enumerate(results) if r is None]
    assert len(winners) == 1
    assert all(r == winners[0] for r in results if r is not None)


def test_run_records_and_metrics_reach_other_machines(machines):
    from tracebank.warehouse.records import RunRecord

    a = machines("a")
    storage = Storage(a)
    record = RunRecord(
        **dict.fromkeys(("content_hash", "base_model", "backend", "output_dir", "save"), "x"),
        run_id="r1",
        status="running",
        dataset="ds@v1",
        hyperparameters={},
        libraries={},
        started_at="2026-12-01T00:00:00+00:00",
    )
    storage.start_run(record)
    storage.append_metric("r1", {"step": 1, "loss": 2.5})
    storage.write_run(dataclasses.replace(record, status="succeeded"))
    b = machines("b")
    [(folder, seen)] = Storage(b).runs()
    assert seen.status == "succeeded"
    assert Storage(b).run_metrics(folder) == [{"step": 1, "loss": 2.5}]


def test_a_silent_claim_of_another_host_goes_stale_and_a_beating_one_does_not(machines, monkeypatch):
    from tracebank.warehouse import claims

    monkeypatch.setattr(claims, "HEARTBEAT_S", 0.3)
    monkeypatch.setattr(claims, "STALE_S", 2.5)
    wh = machines("a")
    me = Owner.current("collect")
    beating = warehouse_claim(wh, "collect")
    assert try_claim(beating, me) is None
    time.sleep(3.5)  # longer than STALE_S, but its holder keeps saying it is alive
    other = Owner(1, "another-host", None, "a collect elsewhere")
    assert try_claim(warehouse_claim(wh, "collect"), other) == me
    beating.release(me)

    silent = Owner(2, "a-dead-host", None, "a collect on a machine that died")
    monkeypatch.setattr(claims, "HEARTBEAT_S", 3600.0)
    assert try_claim(warehouse_claim(wh, "collect"), silent) is None
    assert try_claim(warehouse_claim(wh, "collect"), me) == silent
    time.sleep(3.5)
    assert try_claim(warehouse_claim(wh, "collect"), me) is None


def _record(run_id: str, **changes):
    from tracebank.warehouse.records import RunRecord

    return RunRecord(
        **dict.fromkeys(("content_hash", "base_model", "backend", "output_dir", "save"), "x"),
        run_id=run_id,
        status="running",
        dataset="ds@v1",
        hyperparameters={},
        libraries={},
        started_at="2026-12-01T00:00:00+00:00",
        **changes,
    )


def test_reading_runs_on_the_machine_that_trains_loses_no_metric(machines):
    """Metrics go up at most every few seconds: a reader on the training machine must not
    replace the newer local file with the store's older copy (the next upload would lose lines)."""
    a = machines("a")
    storage = Storage(a)
    storage.start_run(_record("r2", owner=Owner.current("train").to_dict()))
    for step in range(3):  # the first goes up at once, the next two wait for the next upload
        storage.append_metric("r2", {"step": step})
    [(folder, _)] = [(f, r) for f, r in Storage(a).runs() if r.run_id == "r2"]
    assert [e["step"] for e in Storage(a).run_metrics(folder)] == [0, 1, 2]


def test_a_folder_warehouse_copied_onto_the_store_is_read_from_there(tmp_path, machines, s3_bucket):
    """Migrating is a copy (`aws s3 sync`): the manifests are the same files."""
    import boto3
    from tracebank.warehouse.query import run_sql

    folder = Warehouse(tmp_path / "local").init()
    _commit(folder, "c1")
    build_silver(folder, "c1")
    s3 = boto3.client("s3")
    for path in sorted(p for p in folder.root.rglob("*") if p.is_file()):
        s3.upload_file(str(path), s3_bucket, f"moved/{path.relative_to(folder.root).as_posix()}")
    moved = open_warehouse(f"s3://{s3_bucket}/moved")
    query = "SELECT count(*) n, sum(prompt_len) p FROM llm_calls"
    assert run_sql(moved, query).to_pylist() == run_sql(folder, query).to_pylist()
    assert run_sql(moved, query).to_pylist()[0]["n"] > 0


def test_verify_checks_the_store_and_names_a_missing_object(machines, s3_bucket):
    import boto3

    a = machines("a")
    _commit(a, "c1")
    ok = CliRunner().invoke(cli, ["--warehouse", a.location, "verify"])
    assert ok.exit_code == 0 and ok.stdout == "verify: 6 files in 2 commits checked; all intact\n"
    boto3.client("s3").delete_object(Bucket=s3_bucket, Key="shared/wh/collections/c1/attempts-0000.parquet")
    out = CliRunner().invoke(cli, ["--warehouse", a.location, "verify"])
    assert out.exit_code == 1
    assert out.stdout == (
        f"damaged s3://{s3_bucket}/shared/wh/collections/c1/attempts-0000.parquet: missing\n"
        "verify: 6 files in 2 commits checked; 1 damaged\n"
    )
    assert out.stderr.startswith(f"Error: 1 damaged file(s) in s3://{s3_bucket}/shared/wh (restore them")


def test_sql_fetches_only_the_tables_its_statement_reads(machines):
    from tracebank.warehouse.query import run_sql, tables_read

    a = machines("a")
    _commit(a, "c1")
    build_silver(a, "c1")
    b = machines("b")
    fetched = lambda: sorted(p.name.split("-")[0] for p in b.root.rglob("*.parquet"))  # noqa: E731
    assert run_sql(b, "SELECT count(*) n FROM attempts").to_pylist() == [{"n": 4}]
    assert fetched() == ["attempts"]
    assert run_sql(b, "SELECT count(*) n FROM rollout_rewards").to_pylist() == [{"n": 4}]
    assert fetched() == ["attempts", "rewards"]  # the view's own sources come too
    assert tables_read("SHOW TABLES") is None  # cannot tell: everything is there
    names = {r["name"] for r in run_sql(b, "SHOW TABLES").to_pylist()}
    assert {"spans", "llm_calls", "dataset_rows"} <= names
    assert "spans" in fetched()


def test_a_link_planted_in_the_mirror_is_never_read_through(machines):
    """A committed file of the mirror swapped for a link to a file of the same size (inside the
    mirror: one leading out is refused already): the reader refuses it as damage rather than
    read what it points to."""
    a = machines("a")
    _commit(a, "c1")
    [(folder, manifest)] = Storage(a).collections()
    (spans,) = Storage(a).files_of(folder, manifest, "spans")
    elsewhere = a.tmp_dir / "same-size.parquet"
    elsewhere.write_bytes(b"x" * spans.stat().st_size)
    spans.unlink()
    spans.symlink_to(elsewhere)
    with pytest.raises(CorruptFileError, match="is a symbolic link"):
        Storage(a).files_of(folder, manifest, "spans")
    assert elsewhere.read_bytes() == b"x" * elsewhere.stat().st_size
