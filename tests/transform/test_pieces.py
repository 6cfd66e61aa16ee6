"""Bounded memory: token lists spilled to scratch files, silver per span file, splits written in pieces.

Each piece-wise path must give exactly what the whole-at-once path gives: the
same token values, the same silver rows, and the same version content hash.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tracebank.collect import silver as silver_mod
from tracebank.transform import TransformConfig, transform, writer
from tracebank.transform.errors import TransformError
from tracebank.transform.rows import CallTokens
from tracebank.transform.spill import TokenSpill
from tracebank.warehouse import schemas
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.storage import Storage

from tests.fixtures.bronze import commit_collection, synthetic_rollouts
from tests.transform.oracle import scenario

LISTS = pa.list_(pa.int32())


def test_spilled_tokens_equal_the_in_memory_ones(tmp_path):
    prompts = [pa.array([[1, 2, 3], None, [4]], LISTS), pa.array([[5, 6]], LISTS).slice(0, 1)]
    responses = [pa.array([[7], [8, 9], []], LISTS), pa.array([[10, 11, 12]], LISTS)]
    spill = TokenSpill(tmp_path)
    for p, r in zip(prompts, responses, strict=True):
        spill.append(p, r)
    spilled = spill.finish()
    memory = CallTokens.from_arrow(prompts, responses)
    tok = np.array([3, 0, 2, 1], np.int64)
    for a, b in zip(spilled.lists(tok), memory.lists(tok), strict=True):
        assert a.to_pylist() == b.to_pylist()
    assert spilled.lists(tok)[0].to_pylist() == [[5, 6], [1, 2, 3], [4], []]
    assert spilled.lists(tok)[1].to_pylist() == [[10, 11, 12], [7], [], [8, 9]]


def test_a_prompt_that_extends_the_one_before_is_spilled_as_what_it_adds(tmp_path):
    # A conversation across two batches (the second one starts it again), a prompt equal to the
    # one before, one that only looks like an extension (same length prefix, other ids), an
    # empty one in between, and one shorter than the one before.
    prompts = [
        pa.array([[1, 2], [1, 2, 3], [1, 2, 3, 4, 5]], LISTS),
        pa.array([[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6], [1, 2, 9, 4, 5, 6, 7], [], [8], [8, 9]], LISTS),
        pa.array([[8]], LISTS),
    ]
    responses = [pa.array([[0]] * len(p), LISTS) for p in prompts]
    spill = TokenSpill(tmp_path)
    for p, r in zip(prompts, responses, strict=True):
        spill.append(p, r)
    spilled = spill.finish()
    tok = np.array([9, 2, 5, 0, 7, 3, 1, 4, 8, 6], np.int64)
    memory = CallTokens.from_arrow(prompts, responses)
    for a, b in zip(spilled.lists(tok), memory.lists(tok), strict=True):
        assert a.to_pylist() == b.to_pylist()
    # stored: 1 2 | 3 | 4 5 | 6 | (nothing) | 1 2 9 4 5 6 7 | (empty) | 8 | 9 | 8
    assert spilled.prompt_path.stat().st_size == 4 * 16


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_parts_spilled_at_once_read_as_one_spill(tmp_path, threads):
    from tracebank.transform.inputs import spill_tokens
    from tracebank.transform.rows import PieceBuffers, RowTokens

    rng = np.random.default_rng(threads)
    batches = []  # three parts of two batches each; part 1 has an empty batch and empty lists
    for part in range(3):
        for _ in range(2):
            n = 0 if part == 1 and not batches[-1:] else int(rng.integers(1, 6))
            base = [int(x) for x in rng.integers(0, 1000, 4)]
            prompts = [base + [int(x) for x in rng.integers(0, 1000, k)] for k in rng.integers(0, 5, n)]
            batches.append(
                (
                    part,
                    pa.array(prompts, LISTS),
                    pa.array([[int(x)] * (i % 3) for i, x in enumerate(rng.integers(0, 9, n))], LISTS),
                )
            )
    parts = [
        (
            lambda k=k: iter(
                [
                    pa.record_batch({"prompt_token_ids": p, "response_token_ids": r})
                    for part, p, r in batches
                    if part == k
                ]
            )
        )
        for k in range(3)
    ]
    calls = sum(len(p) for _, p, _ in batches)
    spilled = spill_tokens(parts, calls, tmp_path, threads)
    memory = CallTokens.from_arrow([p for _, p, _ in batches], [r for _, _, r in batches])
    tok = rng.permutation(calls).astype(np.int64)
    for a, b in zip(spilled.lists(tok), memory.lists(tok), strict=True):
        assert a.to_pylist() == b.to_pylist()
    assert len(spilled.prompt_path) == 3  # a file pair per part, read as one
    # rows copied out of the three files at once equal the in-memory ones
    plen = np.array([len(x) for x in memory.lists(np.arange(calls))[0].to_pylist()], np.int64)
    rlen = np.diff(memory.response_offsets)
    order = pl.DataFrame({"first": tok, "last": tok})
    got = RowTokens(lambda: spilled, np.arange(calls), plen, rlen).materialize(order, PieceBuffers())
    want = RowTokens(lambda: memory, np.arange(calls), plen, rlen).materialize(order)
    assert [x.to_pylist() for x in got[:3]] == [x.to_pylist() for x in want[:3]]
    (tmp_path / "again").mkdir()
    with pytest.raises(TransformError, match="changed while it was read"):
        spill_tokens(parts, calls + 1, tmp_path / "again", threads)


def test_pieces_cover_the_frame_in_order_within_the_budget():
    frame = pl.DataFrame({"length": [5, 5, 5, 30, 1, 1, 1], "i": range(7)})
    cut = writer.pieces(frame, budget=10)
    assert pl.concat(cut)["i"].to_list() == list(range(7))
    assert [p["i"].to_list() for p in cut] == [[0, 1], [2, 3], [4, 5, 6]]
    assert writer.pieces(frame.clear(), budget=10) == []


@pytest.fixture(scope="module")
def two_layouts(tmp_path_factory):
    """The same rollouts committed once as one span file and once as several."""
    spans, rollouts = synthetic_rollouts(40, seed=7, calls=(2, 5))
    whs = []
    for name, per_file in (("one", None), ("many", 37)):
        wh = Warehouse(tmp_path_factory.mktemp(name) / "warehouse").init()
        commit_collection(wh, spans, rollouts=rollouts, collection_id="c1", span_file_rows=per_file)
        whs.append(wh)
    return whs


def test_silver_built_in_span_batches_equals_silver_built_whole(two_layouts, monkeypatch):
    one, many = two_layouts
    assert len(silver_mod.span_files(many, "c1")) > 1
    whole = {t: pa.concat_tables([p[t] for p in silver_mod.silver_pieces(one, "c1")]) for t in schemas.SILVER}
    assert len(list(silver_mod.silver_pieces(one, "c1"))) == 1
    monkeypatch.setattr(silver_mod, "SPAN_BATCH_BYTES", 20_000)
    monkeypatch.setattr(silver_mod, "_READ_ROWS", 16)
    assert len(list(silver_mod.silver_pieces(one, "c1"))) > 5
    for wh in (one, many):
        batched = [p for p in silver_mod.silver_pieces(wh, "c1")]
        for table, expected in whole.items():
            got = pa.concat_tables([p[table] for p in batched]).to_pylist()
            want = expected.to_pylist()
            if wh is many:  # span_index numbers spans by file, so only it differs between layouts
                for row in got + want:
                    row.pop("span_index", None)
            assert want and got == want, table


def test_rows_written_in_pieces_give_the_same_version(two_layouts, monkeypatch):
    one, many = two_layouts
    config = TransformConfig(name="ds", val_fraction=0.25, seed=3)
    from_one_file = transform(one, config)
    whole = transform(many, config)
    monkeypatch.setattr(writer, "PIECE_TOKENS", 5_000)
    monkeypatch.setattr(writer, "writer_threads", lambda: 1)
    cut = transform(many, replace(config, force=True))  # the same rows again: identical unless forced
    assert not cut.identical and cut.manifest["content_hash"] == whole.manifest["content_hash"]
    assert cut.manifest["stats"] == whole.manifest["stats"] == from_one_file.manifest["stats"]
    assert pq.ParquetFile(cut.folder / "train.parquet").num_row_groups > 3
    rows = [pq.read_table(v.folder / "train.parquet").to_pylist() for v in (from_one_file, whole, cut)]
    assert rows[0] == rows[1] == rows[2]


def _split_rows(version, split: str) -> list[dict]:
    """The split's rows, its files read in the manifest's order."""
    files = [f["path"] for f in version.manifest["files"] if f.get("split", "train") == split]
    return [row for name in files for row in pq.read_table(version.folder / name).to_pylist()]


@pytest.mark.parametrize("threads", [3, 1000])
def test_a_split_of_several_pieces_is_written_as_files_encoded_at_once(two_layouts, monkeypatch, threads):
    _, wh = two_layouts
    config = TransformConfig(name="ds", val_fraction=0.25, seed=3)
    whole = transform(wh, config)
    monkeypatch.setattr(writer, "PIECE_TOKENS", 5_000)
    monkeypatch.setattr(writer, "DIGEST_TOKENS", 3_000)  # the digest reads the rows in other cuts
    monkeypatch.setattr(writer, "writer_threads", lambda: threads)
    sharded = transform(wh, replace(config, force=True))
    assert sharded.manifest["content_hash"] == whole.manifest["content_hash"]
    assert sharded.manifest["stats"] == whole.manifest["stats"]
    train_files = [f for f in sharded.manifest["files"] if f["split"] == "train"]
    # more pieces than threads: a file per thread; else a file per piece (one row group each)
    count = 3 if threads == 3 else len(train_files)
    assert count > 3 or threads == 3
    assert [f["path"] for f in train_files] == [f"train-{i:05d}.parquet" for i in range(count)]
    if threads != 3:
        assert all(pq.ParquetFile(sharded.folder / f["path"]).num_row_groups == 1 for f in train_files)
    assert all(0 < f["rows"] < sum(g["rows"] for g in train_files) for f in train_files)
    for split in ("train", "validation"):
        assert _split_rows(sharded, split) == _split_rows(whole, split)
    for f in train_files:  # each file carries the version's content hash, stamped at the end
        meta = pq.read_schema(sharded.folder / f["path"]).metadata
        assert meta[b"tracebank.content_hash"].decode() == sharded.manifest["content_hash"]


@pytest.mark.parametrize("options", [{"merge": "trajectory"}, {"dedup": True, "select_by": "rollout"}])
def test_options_that_read_tokens_early_work_on_spilled_tokens(tmp_path, options, monkeypatch):
    wh = Warehouse(tmp_path / "warehouse").init()
    sc = scenario(seed=2, n_random=15)
    commit_collection(wh, sc.spans, rollouts=sc.rollouts(), attempts=sc.attempts, collection_id="c1")
    whole = transform(wh, TransformConfig(name="a", **options))
    monkeypatch.setattr(writer, "PIECE_TOKENS", 50)
    cut = transform(wh, TransformConfig(name="b", **options))
    assert cut.manifest["content_hash"] == whole.manifest["content_hash"]


def test_a_failed_file_of_a_split_leaves_no_version(two_layouts, monkeypatch):

    _, wh = two_layouts
    monkeypatch.setattr(writer, "PIECE_TOKENS", 5_000)
    monkeypatch.setattr(writer, "writer_threads", lambda: 2)
    real = writer._write_shard
    started = []

    def second_fails(part, *args):
        started.append(part.height)
        if len(started) == 2:
            raise OSError("disk full")
        return real(part, *args)

    monkeypatch.setattr(writer, "_write_shard", second_fails)
    before = Storage(wh).dataset_versions("failing")
    with pytest.raises(OSError, match="disk full"):
        transform(wh, TransformConfig(name="failing"))
    assert len(started) == 2
    assert Storage(wh).dataset_versions("failing") == before == []
    assert not list(wh.dataset_dir("failing").glob("v*/*.parquet")), "no file of the failed version stays"
