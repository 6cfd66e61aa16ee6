"""Issue 18, the storage findings: a hostile bucket neighbour, damaged files and missing silver.

Each test failed on the commit the issue was filed on: a manifest on the bucket wrote any file
on a reader's machine, `verify` passed flipped bytes on a bucket, one damaged Parquet file or one
wrong-shape manifest broke every `sql`, a silver bit flip was read silently, missing silver read
as zero rows. Property tests throw arbitrary manifests at the parser and the mirror.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path

import boto3
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tracebank.core.errors import CorruptFileError, UsageError
from tracebank.warehouse.backends import open_warehouse
from tracebank.warehouse.bytestore import LocalStore
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.mirror import MirrorStore
from tracebank.warehouse.query import run_sql
from tracebank.warehouse.records import CollectionManifest
from tracebank.warehouse.storage import Storage, parse_manifest

from tests.fixtures.bronze import commit_collection, synthetic_rollouts
from tracebank.cli.main import cli


def _commit(wh: Warehouse, cid: str, n: int = 4, silver: bool = True) -> None:
    spans, rollouts = synthetic_rollouts(n, seed=len(cid))
    commit_collection(wh, spans, rollouts=rollouts, collection_id=cid, silver=silver)


def _cli(wh: Warehouse, *args: str):
    return CliRunner().invoke(cli, ["--warehouse", wh.location, *args])


def _hostile_manifest(entry_path: str, size: int, sha: str) -> bytes:
    files = [{"path": entry_path, "bytes": size, "sha256": sha, "rows": 1, "table": "spans"}]
    return json.dumps({"collection_id": "evil", "files": files, "format_version": 1}).encode()


@pytest.mark.parametrize("planted", ["/tmp/x/owned.sh", "../../../../x/owned.sh", "a/../../owned.sh"])
def test_a_bucket_manifest_cannot_write_outside_the_mirror(planted, s3_bucket, tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEBANK_CACHE_DIR", str(tmp_path / "cache"))
    wh = open_warehouse(f"s3://{s3_bucket}/wh").init()
    _commit(wh, "c1")
    payload = b"#!/bin/sh\necho owned\n"
    s3 = boto3.client("s3")
    s3.put_object(Bucket=s3_bucket, Key="wh/collections/evil/owned.sh", Body=payload)
    sha = hashlib.sha256(payload).hexdigest()
    target = (tmp_path / planted.lstrip("/")) if planted.startswith("/") else tmp_path / "x" / "owned.sh"
    s3.put_object(
        Bucket=s3_bucket,
        Key="wh/collections/evil/manifest.json",
        Body=_hostile_manifest(str(target) if planted.startswith("/") else planted, len(payload), sha),
    )
    out = _cli(wh, "sql", "--format", "csv", "SELECT count(*) AS n FROM spans")
    assert out.exit_code == 0, out.output
    assert out.stdout.splitlines()[1] == str(run_sql(wh, "SELECT count(*) n FROM spans").to_pylist()[0]["n"])
    assert "Warning: left out collections/evil" in out.stderr and "not a plain file name" in out.stderr
    written = [p for p in tmp_path.rglob("owned.sh")]
    assert written == [], written
    verified = _cli(wh, "verify")
    assert verified.exit_code == 1 and "collections/evil/manifest.json" in verified.stdout


def test_verify_on_a_bucket_hashes_each_object(s3_bucket, tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEBANK_CACHE_DIR", str(tmp_path / "cache"))
    wh = open_warehouse(f"s3://{s3_bucket}/wh").init()
    _commit(wh, "c1")
    key = "wh/collections/c1/spans-0000.parquet"
    s3 = boto3.client("s3")
    body = bytearray(s3.get_object(Bucket=s3_bucket, Key=key)["Body"].read())
    body[len(body) // 2 : len(body) // 2 + 8] = bytes(
        b ^ 0xFF for b in body[len(body) // 2 : len(body) // 2 + 8]
    )
    s3.put_object(Bucket=s3_bucket, Key=key, Body=bytes(body))
    out = _cli(wh, "verify")
    assert out.exit_code == 1
    assert f"damaged s3://{s3_bucket}/{key}: content differs from its sha256 in the manifest" in out.stdout


def test_a_wrong_shape_manifest_hides_only_its_own_commit(wh):
    _commit(wh, "c1")
    _commit(wh, "c2")
    (wh.collection_dir("c2") / "manifest.json").write_text(json.dumps({"collection_id": "c2", "files": 3}))
    out = _cli(wh, "sql", "--format", "csv", "SELECT DISTINCT collection_id FROM rollouts")
    assert out.exit_code == 0, out.output
    assert out.stdout.splitlines() == ["collection_id", "c1"]
    assert out.stderr.count("Warning: left out collections/c2") == 1


def test_one_damaged_file_fails_only_its_table(wh):
    _commit(wh, "c1")
    path = wh.collection_dir("c1") / "rollouts-0000.parquet"
    path.write_bytes(bytes(reversed(path.read_bytes())))  # random-looking bytes, same size
    assert _cli(wh, "sql", "SELECT 1 AS one").exit_code == 0
    ok = _cli(wh, "sql", "--format", "csv", "SELECT count(*) AS n FROM llm_calls")
    assert ok.exit_code == 0 and int(ok.stdout.splitlines()[1]) > 0
    bad = _cli(wh, "sql", "SELECT count(*) FROM rollouts")
    assert bad.exit_code == 1 and "Traceback" not in bad.output
    [line] = bad.stderr.splitlines()
    assert line.startswith("Error:") and "rollouts-0000.parquet" in line


def test_a_flipped_bit_in_a_silver_page_is_caught_by_its_checksum(wh):
    _commit(wh, "c1", n=8)
    [(folder, manifest)] = Storage(wh).silver_caches()
    [entry] = manifest.files_of("llm_calls")
    path = folder / entry.path
    columns = pq.ParquetFile(path).metadata.row_group(0)
    tokens = next(
        columns.column(i)
        for i in range(columns.num_columns)
        if "prompt_token_ids" in columns.column(i).path_in_schema
    )
    data = bytearray(path.read_bytes())
    data[tokens.data_page_offset + tokens.total_compressed_size - 1] ^= 0x01  # one bit of page data
    path.write_bytes(bytes(data))
    out = _cli(wh, "transform", "--dataset", "d")
    assert out.exit_code != 0 and "Traceback" not in out.output
    [line] = out.stderr.splitlines()
    assert line.startswith("Error:") and entry.path in line and "CRC checksum verification failed" in line
    assert Storage(wh).dataset_versions() == []


def test_missing_silver_is_said_not_shown_as_zero_rows(wh):
    _commit(wh, "c1", silver=False)
    out = _cli(wh, "sql", "--format", "csv", "SELECT count(*) AS n FROM llm_calls")
    assert out.exit_code == 0 and out.stdout.splitlines()[1] == "0"
    assert "Warning: the silver tables (llm_calls, rewards, messages) leave out collection c1" in out.stderr
    quiet = _cli(wh, "sql", "SELECT count(*) FROM rollouts")
    assert "Warning" not in quiet.stderr  # a statement that reads no silver table is not told


def test_sql_spills_inside_the_warehouse_with_a_memory_cap(wh, tmp_path, monkeypatch):
    from tracebank.warehouse.query import connect

    _commit(wh, "c1")
    monkeypatch.chdir(tmp_path)
    con = connect(wh)
    settings_now = dict(
        con.execute(
            "SELECT name, value FROM duckdb_settings() WHERE name IN ('memory_limit', 'temp_directory')"
        ).fetchall()
    )
    assert Path(settings_now["temp_directory"]).is_relative_to(wh.tmp_dir)
    assert settings_now["memory_limit"] not in ("", None) and not (tmp_path / ".tmp").exists()


# -- properties: no manifest, however shaped, gives a traceback or a write outside --------------
_names = st.one_of(
    st.sampled_from(["/etc/passwd", "..", ".", "../x", "a/b", "a\\b", "\x00", "", "ok.parquet", "~/.bashrc"]),
    st.text(max_size=30),
)
_entries = st.fixed_dictionaries(
    {"path": _names, "bytes": st.integers(-5, 10**6), "sha256": st.text(max_size=70)},
    optional={"rows": st.one_of(st.integers(), st.text()), "table": st.text(max_size=10)},
)
_manifests = st.one_of(
    st.fixed_dictionaries({"collection_id": st.text(max_size=20), "files": st.lists(_entries, max_size=3)}),
    st.dictionaries(st.text(max_size=10), st.one_of(st.integers(), st.text(), st.none()), max_size=4),
    st.lists(st.integers(), max_size=3),
    st.text(max_size=20),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(document=_manifests)
def test_any_manifest_parses_or_fails_in_one_line_and_never_writes_outside(document, tmp_path):
    truth = LocalStore(tmp_path / "bucket")
    truth.put("collections/x/manifest.json", json.dumps(document).encode())
    mirror = MirrorStore(truth, tmp_path / "mirror")
    before = {p for p in tmp_path.rglob("*")}
    try:
        manifest = parse_manifest(mirror, "collections/x", CollectionManifest)
    except CorruptFileError as exc:
        assert "\n" not in exc.one_line()
        return
    for entry in manifest.files if manifest else []:
        with contextlib.suppress(CorruptFileError, UsageError):
            mirror.fetch(f"collections/x/{entry.path}", entry.bytes, entry.sha256)
    after = {p for p in tmp_path.rglob("*")}
    assert all(
        p.is_relative_to(tmp_path / "mirror") or p.is_relative_to(tmp_path / "bucket") for p in after - before
    )


@pytest.mark.parametrize(
    "command", [["report", "-o", "{out}/r.html"], ["export", "d@v1", "--to", "openai", "-o", "{out}/d.jsonl"]]
)
def test_a_truncated_dataset_file_is_one_line_for_every_reader(command, wh, tmp_path):
    from tests.fixtures.datasets import write_dataset

    rows = [{"input_ids": [5, 6, 7], "attention_mask": [1, 1, 1], "labels": [-100, 6, 7]} for _ in range(20)]
    folder, _ = write_dataset(wh, "d", rows)
    data = folder / "train.parquet"
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    out = _cli(wh, *[part.format(out=tmp_path) for part in command])
    assert out.exit_code == 1 and "Traceback" not in out.output, out.output
    [line] = [x for x in out.stderr.splitlines() if not x.startswith("Warning:")]
    assert line.startswith("Error:") and "train.parquet" in line


def test_the_next_collect_builds_silver_an_earlier_one_left_missing(wh, tmp_path):
    from tracebank.collect import CollectConfig, collect
    from tracebank.collect.sources import SpoolSource

    _commit(wh, "c1", silver=False)  # as after `collect --no-silver`, or a kill before the silver build
    spool = tmp_path / "empty-spool"
    spool.mkdir()
    result = collect(SpoolSource(spool), wh, CollectConfig())
    assert result.collection_id is None and result.silver_rebuilt == ["c1"]
    assert Storage(wh).current_silver("c1") is not None
    out = _cli(wh, "sql", "SELECT count(*) FROM llm_calls")
    assert out.exit_code == 0 and "Warning" not in out.stderr
