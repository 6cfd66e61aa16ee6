"""`transform --engine ray` on a real local Ray cluster: the same version as the local engine."""

from __future__ import annotations

import dataclasses

import pyarrow.parquet as pq
import pytest
from tracebank.transform import TransformConfig, ray_engine, transform, writer
from tracebank.transform.errors import TransformUsageError
from tracebank.warehouse.backends import open_warehouse
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.storage import Storage

from tests.fixtures.bronze import commit_collection, synthetic_rollouts
from tests.transform.oracle import scenario


@pytest.fixture
def two_collections(tmp_path):
    wh = Warehouse(tmp_path / "warehouse").init()
    spans, rollouts = synthetic_rollouts(30, seed=11, calls=(2, 5), tasks=6)
    commit_collection(wh, spans, rollouts=rollouts, collection_id="c1", span_file_rows=40)
    sc = scenario(seed=3, n_random=12)
    commit_collection(wh, sc.spans, rollouts=sc.rollouts(), attempts=sc.attempts, collection_id="c2")
    return wh


def _on_ray(config, address):
    return dataclasses.replace(config, engine="ray", address=address)


def _rows(result):
    return [
        row
        for f in result.manifest["files"]
        for row in pq.read_table(result.folder / f["path"]).to_pylist()
        if f["split"] == "train"
    ]


def test_ray_engine_commits_the_local_engines_version(two_collections, ray_address, monkeypatch):
    wh = two_collections
    config = TransformConfig(name="ds", val_fraction=0.25, top_fraction=0.8, seed=5)
    # Several pieces per split, each written by a worker.
    monkeypatch.setattr(writer, "PIECE_TOKENS", 20_000)
    monkeypatch.setattr(ray_engine, "PIECES_PER_JOB", 2)  # several Ray Data jobs, in order
    on_ray = transform(wh, _on_ray(config, ray_address))
    local = transform(wh, dataclasses.replace(config, force=True))  # else: identical to v1
    assert on_ray.manifest["counts"]["silver"] == local.manifest["counts"]["silver"] == {"cached": 2}
    assert on_ray.manifest["content_hash"] == local.manifest["content_hash"]
    assert on_ray.manifest["stats"] == local.manifest["stats"]
    pieces = [f for f in on_ray.manifest["files"] if f["split"] == "train"]
    assert len(pieces) > 2 and pieces[0]["path"] == "train-00000.parquet"
    Storage(wh).verify_hashes(on_ray.folder, on_ray.record)
    assert _rows(on_ray) == _rows(local)
    assert not list(wh.tmp_dir.iterdir()), "the scratch folder is removed"
    # Every piece a worker wrote names the version and its hash, as the local engine's files do.
    first_file = {f["split"]: f["path"] for f in reversed(local.manifest["files"])}
    expected = {split: _provenance(local.folder / first_file[split]) for split in ("train", "validation")}
    assert expected["train"]["tracebank.content_hash"] == local.manifest["content_hash"]
    for f in on_ray.manifest["files"]:
        got = _provenance(on_ray.folder / f["path"])
        assert got["tracebank.version"] == str(on_ray.ref.version)
        assert got == {**expected[f["split"]], "tracebank.version": str(on_ray.ref.version)}


def _provenance(path):
    footer = pq.read_metadata(path).metadata
    fields = {k.decode(): v.decode() for k, v in footer.items() if k.startswith(b"tracebank.")}
    assert fields == {k.decode(): v.decode() for k, v in pq.read_schema(path).metadata.items()}
    return fields


def test_an_identical_version_on_ray_writes_no_piece(two_collections, ray_address, monkeypatch):
    from tracebank.transform import ray_engine

    config = TransformConfig(name="twice", seed=2)
    first = transform(two_collections, config)

    def no_write(row):  # runs on a worker: dispatching any piece fails the transform
        raise AssertionError("an identical version wrote a piece")

    monkeypatch.setattr(ray_engine, "_write_piece", no_write)
    again = transform(two_collections, _on_ray(config, ray_address))
    assert again.identical and again.ref == first.ref
    assert [p.name for p in two_collections.dataset_dir("twice").iterdir()] == ["v0001"]


def test_ray_engine_on_an_s3_warehouse_commits_the_local_engines_hash(
    tmp_path, s3_bucket, ray_address, monkeypatch
):
    """On object storage the driver pulls the silver caches into this machine's mirror, the
    workers write pieces beside them, and the commit uploads them before the manifest."""
    monkeypatch.setenv("TRACEBANK_CACHE_DIR", str(tmp_path / "machine-a"))
    monkeypatch.setattr(writer, "PIECE_TOKENS", 20_000)
    location = f"s3://{s3_bucket}/wh"
    wh = open_warehouse(location).init()
    spans, rollouts = synthetic_rollouts(30, seed=11, calls=(2, 5), tasks=6)
    commit_collection(wh, spans, rollouts=rollouts, collection_id="c1", span_file_rows=40)
    config = TransformConfig(name="ds", val_fraction=0.25, top_fraction=0.8, seed=5)
    on_ray = transform(wh, _on_ray(config, ray_address))
    local = transform(wh, dataclasses.replace(config, name="ds-local"))
    assert on_ray.manifest["content_hash"] == local.manifest["content_hash"]
    assert len([f for f in on_ray.manifest["files"] if f["split"] == "train"]) > 2

    monkeypatch.setenv("TRACEBANK_CACHE_DIR", str(tmp_path / "machine-b"))
    elsewhere = open_warehouse(location)
    [(folder, manifest)] = Storage(elsewhere).dataset_versions("ds")
    assert manifest.content_hash == on_ray.manifest["content_hash"]
    Storage(elsewhere).verify_hashes(folder, manifest)


@pytest.mark.parametrize("options", [{"merge": "trajectory"}, {"dedup": True, "per_task": 1}])
def test_options_that_read_tokens_on_the_driver(two_collections, ray_address, options):
    config = TransformConfig(name="opt", **options)
    local = transform(two_collections, config)
    on_ray = transform(two_collections, _on_ray(config, ray_address))
    assert on_ray.manifest["content_hash"] == local.manifest["content_hash"]


def test_address_without_ray_engine_is_a_usage_error(wh):
    with pytest.raises(TransformUsageError, match="--address only applies to --engine ray"):
        transform(wh, TransformConfig(name="x", address="127.0.0.1:1"))


def _cli(wh, *args):
    from click.testing import CliRunner

    from tracebank.cli.main import cli

    return CliRunner().invoke(cli, ["--warehouse", str(wh.root), *args])


def test_cli_engine_ray_prints_the_local_summary(two_collections, ray_address):
    local = _cli(two_collections, "transform", "--name", "a")
    on_ray = _cli(two_collections, "transform", "--name", "b", "--engine", "ray", "--address", ray_address)
    assert local.exit_code == 0 and on_ray.exit_code == 0, on_ray.output
    assert on_ray.stdout == local.stdout.replace("wrote a@v1", "wrote b@v1")


_PRINTING_TASK = """
import sys, time
import ray
from tracebank.transform.ray_engine import connect

connect(sys.argv[1])

@ray.remote
def noisy():
    print("NOISE-ON-STDOUT", flush=True)
    print("NOISE-ON-STDERR", file=sys.stderr, flush=True)
    return 1

assert ray.get(noisy.remote()) == 1
time.sleep(3)  # the log monitor forwards a worker's lines within about a second
ray.shutdown()
print("RESULT")
"""


def test_the_clusters_own_lines_never_reach_stdout(ray_address):
    import os
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _PRINTING_TASK, ray_address],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "RESULT\n"


def test_cli_address_without_ray_engine_is_one_line(two_collections):
    out = _cli(two_collections, "transform", "--name", "a", "--address", "127.0.0.1:1")
    assert out.exit_code == 2
    assert out.output.splitlines()[0] == "Error: --address only applies to --engine ray"


def test_two_engines_writing_the_same_name_at_once_get_distinct_versions(two_collections, ray_address):
    import threading

    results: dict[str, object] = {}

    def run(engine: str) -> None:
        address = ray_address if engine == "ray" else None
        config = TransformConfig(name="same", force=True, engine=engine, address=address)
        results[engine] = transform(two_collections, config)

    threads = [threading.Thread(target=run, args=(e,)) for e in ("local", "ray")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    local, on_ray = results["local"], results["ray"]
    assert {local.ref.version, on_ray.ref.version} == {1, 2}  # type: ignore[attr-defined]
    assert local.manifest["content_hash"] == on_ray.manifest["content_hash"]  # type: ignore[attr-defined]
