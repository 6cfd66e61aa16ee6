"""Typed records: JSON round trips, validation on read (one line naming the file), format versions."""

import json

import pyarrow as pa
import pytest
from tracebank.core.errors import CorruptFileError, DamageWarning, WarehouseError
from tracebank.warehouse import catalog
from tracebank.warehouse.layout import MANIFEST
from tracebank.warehouse.records import (
    CollectionManifest,
    DatasetManifest,
    FileEntry,
    RunRecord,
    SilverManifest,
)
from tracebank.warehouse.storage import Storage

ENTRY = FileEntry(
    path="train.parquet", bytes=10, sha256="ab" * 32, rows=2, table="dataset_rows", split="train"
)


def _run(**overrides):
    fields = dict(
        run_id="r1",
        status="running",
        dataset="qa@v1",
        content_hash="h",
        base_model="m",
        backend="trl",
        output_dir="o",
        save="merged",
        hyperparameters={"seed": 1},
        libraries={"torch": "2"},
        started_at="2026-01-01T00:00:00+00:00",
    )
    return RunRecord(**{**fields, **overrides})


@pytest.mark.parametrize(
    "record",
    [
        CollectionManifest(
            collection_id="c1", counts={"spans": 3}, evicted=[{"rollout_id": "r"}], files=[ENTRY]
        ),
        SilverManifest(collection_id="c1", silver_version=1, counts={"llm_calls": 2}, files=[ENTRY]),
        DatasetManifest(name="qa", version=2, content_hash="h", rows=2, stats={"tokens": 9}, files=[ENTRY]),
        _run(summary={"steps": 3}),
    ],
    ids=lambda r: type(r).__name__,
)
def test_records_round_trip_through_json(record):
    text = json.dumps(record.to_json())
    assert type(record).from_json(json.loads(text), "x.json") == record


def test_unknown_keys_survive_a_rewrite():
    data = {**_run().to_json(), "added_by_a_newer_minor": {"k": 1}}
    assert RunRecord.from_json(data, "run.json").to_json() == data


def test_a_manifest_without_format_version_reads_as_version_1():
    record = CollectionManifest.from_json({"collection_id": "c1", "files": []}, "m.json")
    assert record.format_version == 1 and record.files == []


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ([1, 2], "collection manifest should be an object, not list"),
        ({"files": []}, "collection manifest lacks collection_id"),
        ({"collection_id": 7}, "collection manifest.collection_id should be str, not int"),
        ({"collection_id": "c", "files": {}}, "collection manifest.files should be a list, not dict"),
        (
            {"collection_id": "c", "files": [{"path": "x"}]},
            "collection manifest.files[0] lacks bytes, sha256",
        ),
        ({"collection_id": "c", "counts": [1]}, "collection manifest.counts should be an object, not list"),
        ({"collection_id": "c", "format_version": 99}, "is format v99, newer than this tracebank reads (v1)"),
        (
            {"collection_id": "c", "concurrency": True},
            "collection manifest.concurrency should be int, not bool",
        ),
    ],
)
def test_a_manifest_of_the_wrong_shape_is_one_line_naming_the_file(wh, data, says):
    folder = wh.collection_dir("c1")
    folder.mkdir(parents=True)
    (folder / MANIFEST).write_text(json.dumps(data))
    with pytest.raises(CorruptFileError) as err:
        Storage(wh).collection("c1")
    line = err.value.one_line()
    assert "\n" not in line and str(folder / MANIFEST) in line and says in line
    assert isinstance(err.value, WarehouseError)
    with pytest.warns(DamageWarning, match="left out collections/c1: ") as told:
        assert Storage(wh).collections() == []  # a listing leaves it out and says so
    assert line in str(told[0].message)


def test_a_run_record_of_the_wrong_shape_names_the_file(wh):
    folder = wh.run_dir("r1")
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({**_run().to_json(), "summary": "fast"}))
    with pytest.raises(
        CorruptFileError, match=r"run\.json is not a valid run record: run record\.summary should"
    ):
        Storage(wh).read_run("r1")
    with pytest.warns(DamageWarning, match=r"left out run r1: .*run record\.summary should"):
        assert Storage(wh).runs() == []


def test_invalid_json_names_the_file(wh):
    folder = wh.version_dir("qa", 1)
    folder.mkdir(parents=True)
    (folder / MANIFEST).write_text("{")
    with pytest.raises(CorruptFileError, match=r"v0001/manifest\.json is not valid JSON"):
        Storage(wh).read_manifest(folder, DatasetManifest)
    with pytest.warns(DamageWarning, match=r"v0001/manifest\.json is not valid JSON"):
        assert Storage(wh).dataset_versions() == []


def test_storage_writes_the_current_format_version_last(wh):
    storage = Storage(wh)
    version, folder = storage.reserve_version("qa")
    entry = storage.write_table(folder, "train.parquet", pa.table({"input_ids": [[1, 2]]}), "dataset_rows")
    assert Storage(wh).read_manifest(folder, DatasetManifest) is None  # data written, nothing visible yet
    storage.commit_version(
        folder, DatasetManifest(name="qa", version=version, content_hash="h", files=[entry])
    )
    written = json.loads((folder / MANIFEST).read_text())
    assert written["format_version"] == DatasetManifest.FORMAT_VERSION
    assert catalog.resolve_dataset(wh, "qa")[2].files == [entry]


def test_a_version_manifest_must_match_its_folder(wh):
    storage = Storage(wh)
    _, folder = storage.reserve_version("qa")
    with pytest.raises(WarehouseError, match="does not belong"):
        storage.commit_version(folder, DatasetManifest(name="qa", version=7, content_hash="h"))


def test_two_reservations_get_two_versions(wh):
    storage = Storage(wh)
    assert [storage.reserve_version("qa")[0] for _ in range(2)] == [1, 2]


def test_replacing_a_silver_cache_leaves_the_old_files_to_gc(wh):
    from tracebank.warehouse.gc import gc

    storage = Storage(wh)

    def make(files):
        return SilverManifest(collection_id="c1", silver_version=1, files=files)

    bronze = wh.collection_dir("c1")  # silver is kept only for a committed collection
    storage.commit_collection(bronze, CollectionManifest(collection_id="c1", files=[]))
    first = storage.replace_silver("c1", {"rewards": pa.table({"a": [1]})}, make)
    second = storage.replace_silver("c1", {"rewards": pa.table({"a": [2]})}, make)
    folder = wh.silver_collection_dir("c1")
    # Readers that read the first manifest a moment ago still find its files (issue 12, point 6).
    assert sorted(p.name for p in folder.glob("*.parquet")) == sorted(
        [first.files[0].path, second.files[0].path]
    )
    assert storage.silver("c1") == second
    gc(wh, min_age_s=0)
    assert sorted(p.name for p in folder.glob("*.parquet")) == [second.files[0].path]


def test_a_run_record_is_rewritten_whole(wh):
    storage = Storage(wh)
    record = _run()
    folder = storage.start_run(record)
    storage.append_metric("r1", {"step": 1, "loss": 2.5})
    record.status = "succeeded"
    storage.write_run(record)
    ((read_folder, read),) = storage.runs()
    assert read_folder == folder and read == record
    assert storage.run_metrics(folder) == [{"step": 1, "loss": 2.5}]


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_manifest_holding_a_non_standard_number_is_one_line_naming_the_file(wh, number):
    """Manifests are read as standard JSON only: Python's json reads NaN, Infinity and 1e999 (as
    inf), which the report's page script, jq and DuckDB refuse."""
    storage = Storage(wh)
    version, folder = storage.reserve_version("qa")
    storage.commit_version(folder, DatasetManifest(name="qa", version=version, content_hash="h"))
    text = (folder / MANIFEST).read_text().replace('"stats": {}', f'"stats": {{"reward": {number}}}')
    (folder / MANIFEST).write_text(text)
    with pytest.raises(CorruptFileError, match=r"v0001/manifest\.json is not valid JSON: it holds") as err:
        Storage(wh).read_manifest(folder, DatasetManifest)
    assert "\n" not in err.value.one_line()
    with pytest.warns(DamageWarning, match=r"left out datasets/qa/v0001"):
        assert Storage(wh).dataset_versions() == []


def test_a_run_record_holding_nan_is_refused_naming_the_file(wh):
    Storage(wh).start_run(_run())
    path = wh.run_dir("r1") / "run.json"
    path.write_text(path.read_text().replace('"summary": {}', '"summary": {"loss": NaN}'))
    with pytest.raises(CorruptFileError, match=r"run\.json is not valid JSON: it holds NaN"):
        Storage(wh).read_run("r1")


def test_a_non_finite_record_is_refused_in_memory_too():
    data = {**_run().to_json(), "summary": {"loss": float("inf")}}
    with pytest.raises(CorruptFileError, match=r"run record\.summary\.loss is inf, not a finite number"):
        RunRecord.from_json(data, "memory")


def test_writing_a_non_finite_number_fails_before_anything_is_committed(wh):
    """Never a manifest with NaN or Infinity (not JSON), and never half a commit: the error names
    the field, the version stays invisible and its reservation can be given back."""
    storage = Storage(wh)
    version, folder = storage.reserve_version("qa")
    entry = storage.write_table(folder, "train.parquet", pa.table({"input_ids": [[1, 2]]}), "dataset_rows")
    manifest = DatasetManifest(
        name="qa", version=version, content_hash="h", stats={"reward": {"max": float("inf")}}, files=[entry]
    )
    with pytest.raises(
        WarehouseError, match=r"refusing to write dataset manifest: stats\.reward\.max is inf, not a finite"
    ):
        storage.commit_version(folder, manifest)
    assert not (folder / MANIFEST).exists() and Storage(wh).dataset_versions() == []
    record = _run(summary={"loss": float("nan")})
    with pytest.raises(WarehouseError, match=r"run record r1: summary\.loss is nan"):
        storage.start_run(record)
    assert storage.run_ids() == []


@pytest.mark.parametrize(
    ("changes", "line"),
    [
        (
            dict(
                status="succeeded",
                summary={
                    "train_loss_first": 2.5,
                    "train_loss_last": 0.123456,
                    "eval_loss_best": 0.2,
                    "steps": 24,
                    "tokens_per_s": 12345.6,
                },
                best_checkpoint={"step": 20, "eval_loss": 0.2},
            ),
            "run r1 succeeded: loss 2.5000 -> 0.1235, eval best 0.2000 (kept the step-20 checkpoint), "
            "24 steps, 12,346 tokens/s, output o",
        ),
        (
            dict(status="failed", summary={"steps": 3}, best_checkpoint={"step": 3}),
            "run r1 failed: loss n/a -> n/a, 3 steps, n/a tokens/s, output o",
        ),
        (
            dict(status="succeeded", hyperparameters={"node_rank": 1, "nnodes": 2, "nproc_per_node": 4}),
            "node 1 of 2 finished its 4 rank(s); node 0 records the run and writes the model to o",
        ),
    ],
    ids=["best-checkpoint", "no-losses", "other-node"],
)
def test_a_run_record_says_how_it_went_in_one_line(changes, line):
    assert _run(**changes).summary_line() == line
