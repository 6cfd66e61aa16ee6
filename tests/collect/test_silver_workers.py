"""Silver builds of several collections in worker processes: the same caches, the same errors."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pyarrow.parquet as pq
import pytest
from tracebank.collect import build_silver
from tracebank.core.errors import TracebankError
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.storage import Storage

from tests.fixtures.bronze import commit_collection, synthetic_rollouts

IDS = ("c1", "c2", "c3")


def _warehouse(root) -> Warehouse:
    wh = Warehouse(root).init()
    for n, cid in enumerate(IDS):
        spans, rollouts = synthetic_rollouts(6, seed=n, calls=(2, 4))
        commit_collection(wh, spans, rollouts=rollouts, collection_id=cid, silver=False)
    return wh


def _rows(wh: Warehouse, cid: str) -> dict[str, list]:
    manifest = Storage(wh).current_silver(cid)
    assert manifest is not None
    folder = wh.silver_collection_dir(cid)
    return {f.table: pq.read_table(folder / f.path).to_pylist() for f in manifest.files}


def test_workers_build_the_same_caches_in_collection_order(tmp_path):
    side_by_side = _warehouse(tmp_path / "wh")
    one = build_silver(side_by_side, workers=1)
    rows = {cid: _rows(side_by_side, cid) for cid in IDS}
    many = build_silver(side_by_side, force=True, workers=2)
    assert [m.collection_id for m in many] == list(IDS) == [m.collection_id for m in one]
    assert [m.counts for m in many] == [m.counts for m in one]
    assert [m.files for m in many] != [m.files for m in one]  # new files: rebuilt
    assert many == [Storage(side_by_side).current_silver(cid) for cid in IDS]
    for cid in IDS:
        assert _rows(side_by_side, cid) == rows[cid]
    # A current cache is reused, a missing one built: c2 alone is rebuilt, in place of order.
    (side_by_side.silver_collection_dir("c2") / "manifest.json").unlink()
    again = build_silver(side_by_side, workers=2)
    assert again[0] == many[0] and again[2] == many[2] and again[1].files != many[1].files


def _break(wh: Warehouse, cid: str) -> None:
    (spans,) = wh.collection_dir(cid).glob("spans-*.parquet")
    spans.write_bytes(spans.read_bytes()[:-100])


def test_a_failed_worker_build_raises_the_in_process_error_and_commits_nothing_of_it(tmp_path):
    side_by_side = _warehouse(tmp_path / "wh")
    _break(side_by_side, "c2")
    with pytest.raises(TracebankError) as expected:
        build_silver(side_by_side, workers=1)
    first = Storage(side_by_side).current_silver("c1")
    with pytest.raises(TracebankError) as got:
        build_silver(side_by_side, force=True, workers=2)
    assert type(got.value) is type(expected.value)
    assert got.value.one_line() == expected.value.one_line()
    assert got.value.hint == expected.value.hint
    assert got.value.__cause__ is None and got.value.__context__ is None
    assert expected.value.hint and "c2" in expected.value.one_line()
    again = Storage(side_by_side).current_silver("c1")  # rebuilt and committed by its worker
    assert first is not None and again is not None and again.files != first.files
    assert Storage(side_by_side).current_silver("c2") is None
    assert not (side_by_side.silver_collection_dir("c2") / "manifest.json").exists()


def test_a_script_that_builds_at_its_top_level_is_not_run_again_by_the_workers(tmp_path):
    wh = _warehouse(tmp_path / "wh")
    script = tmp_path / "build.py"
    marker = tmp_path / "runs.txt"
    script.write_text(
        textwrap.dedent(
            f"""
            from tracebank.collect import build_silver
            from tracebank.warehouse.backends import open_warehouse
            with open({str(marker)!r}, "a") as fh:
                fh.write("run\\n")
            print(len(build_silver(open_warehouse({str(wh.root)!r}), workers=2)))
            """
        )
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "3\n" and marker.read_text() == "run\n"
    assert all(Storage(wh).current_silver(cid) is not None for cid in IDS)


def test_a_hostile_collection_id_never_reaches_the_workers(tmp_path, monkeypatch):
    from tracebank.collect import silver_workers
    from tracebank.core.errors import UsageError

    started = []
    monkeypatch.setattr(silver_workers.subprocess, "Popen", lambda *a, **k: started.append(a))
    wh = Warehouse(tmp_path / "warehouse").init()
    # one request line each: a newline in a listed folder name would desynchronise the answers
    with pytest.raises(UsageError, match="invalid collection id"):
        silver_workers.build_in_workers(wh, ["c1", "c2\nc3"], False, 2)
    assert started == []
