"""`tracebank gc` removes only what crashed writers left, and says what it freed."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
from click.testing import CliRunner
from tracebank.warehouse.gc import gc
from tracebank.warehouse.records import CollectionManifest
from tracebank.warehouse.schemas import SPANS, conform
from tracebank.warehouse.storage import Storage

from tracebank.cli.main import cli

HOUR_AGO = time.time() - 7200


def _old(path, when=HOUR_AGO):
    for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.utime(p, (when, when))
    return path


def _committed(wh):
    folder = wh.collection_dir("c1")
    table = conform(pa.table({"collection_id": ["c1"], "name": ["a"]}), SPANS)
    storage = Storage(wh)
    entry = storage.write_table(folder, "spans-0000.parquet", table, "spans")
    storage.commit_collection(folder, CollectionManifest(collection_id="c1", files=[entry]))
    return folder


def _snapshot(folder):
    return sorted((str(p.relative_to(folder)), p.read_bytes()) for p in folder.rglob("*") if p.is_file())


def test_gc_removes_old_leftovers_and_keeps_committed_data_and_young_files(wh):
    committed = _old(_committed(wh))
    kept = _snapshot(committed)
    stale_tmp = committed / "spans-0001.parquet.tmp-0123456789ab"
    stale_tmp.write_bytes(b"x" * 1000)
    _old(stale_tmp)
    young_tmp = committed / "spans-0002.parquet.tmp-ba9876543210"
    young_tmp.write_bytes(b"y" * 10)
    abandoned = wh.collection_dir("c2")
    abandoned.mkdir()
    (abandoned / "spans-0000.parquet").write_bytes(b"z" * 500)
    _old(abandoned)
    scratch = wh.tmp_dir / "train-20260101-000000-qa-abcd"
    scratch.mkdir()
    (scratch / "rows.arrow").write_bytes(b"s" * 2000)
    _old(scratch)

    report = gc(wh, dry_run=True)
    removed = sorted(Path(p).name for p, _ in report.removed)
    assert removed == sorted([stale_tmp.name, abandoned.name, scratch.name])
    assert stale_tmp.exists() and abandoned.exists() and scratch.exists()

    out = CliRunner().invoke(cli, ["--warehouse", str(wh.root), "gc"])
    assert out.exit_code == 0
    lines = out.stdout.splitlines()
    assert lines[-1] == "gc: freed 3.4 KB in 3 item(s)"
    assert sorted(lines[:-1]) == sorted(
        [
            f"removed {stale_tmp} (1,000 bytes)",
            f"removed {abandoned} (500 bytes)",
            f"removed {scratch} (2,000 bytes)",
        ]
    )
    assert not stale_tmp.exists() and not abandoned.exists() and not scratch.exists()
    assert young_tmp.exists()
    assert _snapshot(committed) == kept + [(young_tmp.name, b"y" * 10)]


def test_gc_on_a_clean_warehouse_frees_nothing(wh):
    _committed(wh)
    out = CliRunner().invoke(cli, ["--warehouse", str(wh.root), "gc"])
    assert out.stdout == "gc: freed 0 B in 0 item(s)\n"


def test_min_age_zero_removes_young_leftovers_too(wh):
    tmp = wh.tmp_dir / "scratch"
    tmp.mkdir()
    report = gc(wh, min_age_s=0)
    assert [p for p, _ in report.removed] == [str(tmp)] and not tmp.exists()
