"""Reward layers in the warehouse: committed like dataset versions; gc and verify know them."""

from __future__ import annotations

import pytest
from tracebank.core.errors import NotFoundError
from tracebank.warehouse import layout
from tracebank.warehouse.catalog import resolve_reward_layer
from tracebank.warehouse.gc import gc
from tracebank.warehouse.records import RewardLayerManifest
from tracebank.warehouse.storage import Storage
from tracebank.warehouse.verify import verify

from tests.fixtures.layers import commit_layer as commit_scores


def commit_layer(wh, name: str, scores: list[float | None]) -> RewardLayerManifest:
    return commit_scores(wh, name, {f"r{i}": score for i, score in enumerate(scores)})


def test_layers_resolve_by_name_and_version_and_read_back(wh):
    commit_layer(wh, "short", [1.0, None])
    commit_layer(wh, "short", [2.0])
    assert layout.commit_folder_of("rewards/short/v0001/scores.parquet").kind == "reward"
    ref, folder, manifest = resolve_reward_layer(wh, "short")
    assert ref == "short@v2" and manifest.content_hash == "h2"
    ref, folder, manifest = resolve_reward_layer(wh, "short@v1")
    assert Storage(wh).reward_scores(folder, manifest).column("score").to_pylist() == [1.0, None]
    with pytest.raises(NotFoundError, match="short@v3 does not exist") as missing:
        resolve_reward_layer(wh, "short@v3")
    assert missing.value.hint == "short has versions v1, v2"
    with pytest.raises(NotFoundError, match="no reward layer named 'other'") as unknown:
        resolve_reward_layer(wh, "other")
    assert "tracebank rescore" in (unknown.value.hint or "")


def test_gc_keeps_committed_layers_removes_abandoned_ones_and_verify_hashes_them(wh):
    commit_layer(wh, "short", [1.0])
    _, abandoned = Storage(wh).reserve_reward_layer("short")  # a writer that died before its commit
    (abandoned / "scores.parquet").write_bytes(b"partial")
    report = verify(wh)
    assert not report.damaged and report.commits >= 1
    gc(wh, min_age_s=0)
    assert (wh.root / "rewards/short/v0001/scores.parquet").is_file()
    assert not abandoned.exists()
    (wh.root / "rewards/short/v0001/scores.parquet").write_bytes(b"x")
    assert [where for where, _ in verify(wh).damaged] == [
        f"{wh.store.uri}/rewards/short/v0001/scores.parquet"
    ]


def test_a_layer_written_before_the_samples_columns_reads_with_them_empty(wh):
    import pyarrow as pa
    from tracebank.warehouse.query import run_sql
    from tracebank.warehouse.storage import encode_parquet

    storage = Storage(wh)
    version, folder = storage.reserve_reward_layer("old")
    old = pa.table(
        {"collection_id": ["c"], "rollout_id": ["r0"], "attempt_id": ["a"], "score": [0.5], "error": [None]}
    )
    entry = storage.write_buffer(folder, "scores.parquet", encode_parquet(old), 1, "reward_scores")
    manifest = RewardLayerManifest(
        name="old", version=version, scorer="m:f", source_hash="s", content_hash="h", files=[entry]
    )
    storage.commit_reward_layer(folder, manifest)
    commit_layer(wh, "new", [1.0])
    table = storage.reward_scores(folder, manifest)
    assert table.column("score").to_pylist() == [0.5] and table.column("samples").to_pylist() == [None]
    rows = run_sql(wh, "SELECT layer, score, samples_std FROM reward_scores ORDER BY layer").to_pylist()
    assert rows == [
        {"layer": "new", "score": 1.0, "samples_std": None},
        {"layer": "old", "score": 0.5, "samples_std": None},
    ]
