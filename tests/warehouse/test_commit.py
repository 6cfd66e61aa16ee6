import json
import os
import signal
import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest
from tracebank.core.errors import CorruptFileError, WarehouseError
from tracebank.warehouse.layout import TMP_MARK
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.records import CollectionManifest, FileEntry
from tracebank.warehouse.storage import Storage


def _commit_collection(wh: Warehouse, cid: str, n: int) -> None:
    folder, storage = wh.collection_dir(cid), Storage(wh)
    table = pa.table({"collection_id": [cid] * n, "rollout_id": [f"ro-{i}" for i in range(n)]})
    entry = storage.write_table(folder, "rollouts-0000.parquet", table, "rollouts")
    storage.commit_collection(folder, CollectionManifest(collection_id=cid, files=[entry]))


def test_init_writes_format_and_is_idempotent(tmp_path):
    wh = Warehouse(tmp_path / "w").init()
    first = wh.format_file.read_text()
    wh.init()
    assert json.loads(first) == {"format": "tracebank-warehouse", "version": 1}
    assert wh.format_file.read_text() == first


def test_newer_format_is_refused(tmp_path):
    wh = Warehouse(tmp_path / "w").init()
    wh.format_file.write_text(json.dumps({"format": "tracebank-warehouse", "version": 99}))
    with pytest.raises(WarehouseError, match="newer than this tracebank"):
        wh.check_format()


def test_python_package_is_not_a_warehouse(tmp_path):
    (tmp_path / "__init__.py").write_text("")
    with pytest.raises(WarehouseError, match="is a Python package"):
        Warehouse(tmp_path).init()


def test_manifest_lists_size_and_hash(wh):
    _commit_collection(wh, "c1", 3)
    manifest = Storage(wh).read_manifest(wh.collection_dir("c1"), CollectionManifest)
    assert manifest is not None
    (entry,) = manifest.files
    assert entry.rows == 3 and len(entry.sha256) == 64 and entry.table == "rollouts"
    assert entry.bytes == (wh.collection_dir("c1") / entry.path).stat().st_size
    Storage(wh).verify_hashes(wh.collection_dir("c1"), manifest)


def test_uncommitted_folder_is_invisible(wh):
    _commit_collection(wh, "c1", 2)
    folder = wh.collection_dir("c2")
    Storage(wh).write_table(folder, "rollouts-0000.parquet", pa.table({"rollout_id": ["x"]}), "rollouts")
    assert [f.name for f, _ in Storage(wh).collections()] == ["c1"]


def test_tampered_file_fails_hash_check(wh):
    _commit_collection(wh, "c1", 2)
    folder = wh.collection_dir("c1")
    path = folder / "rollouts-0000.parquet"
    data = bytearray(path.read_bytes())
    data[10] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match="rollouts-0000.parquet does not match its sha256"):
        Storage(wh).verify_hashes(folder, Storage(wh).collections()[0][1])


def test_commit_refuses_manifest_naming_missing_file(wh):
    with pytest.raises(WarehouseError, match="gone.parquet is missing"):
        Storage(wh).commit_collection(
            wh.collection_dir("c9"),
            CollectionManifest(
                collection_id="c9", files=[FileEntry(path="gone.parquet", bytes=1, sha256="0")]
            ),
        )


def test_writer_killed_mid_write_leaves_only_temp_files(wh, tmp_path):
    """SIGKILL while a data file is being written: nothing final, nothing committed."""
    script = textwrap.dedent(f"""
        import os, signal, pyarrow as pa, pyarrow.parquet as pq
        from pathlib import Path
        from tracebank.warehouse.atomic import atomic_path
        final = Path({str(wh.collection_dir("c1") / "spans-0000.parquet")!r})
        with atomic_path(final) as tmp:
            pq.write_table(pa.table({{"a": list(range(1000))}}), tmp)
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=os.getcwd())
    assert proc.returncode == -signal.SIGKILL
    names = [p.name for p in wh.collection_dir("c1").iterdir()]
    assert len(names) == 1 and TMP_MARK in names[0]
    assert Storage(wh).collections() == []
