"""`transform --engine ray`: the same transform as Ray Data jobs over the same warehouse files.

Three steps, the outer two on the cluster:

1. per collection, in parallel (one Ray Data job): spill the collection's token
   lists from its silver cache (which collect built) into a scratch folder every
   node sees (``transform.spill``); only the offsets come back;
2. on the driver: plan and select the rows from the small per-call columns,
   exactly as the local engine does (``recipe.build_recipe``);
3. per piece of each split, in parallel (a second job): a worker gathers the
   piece's calls from the scratch files, copies out its rows and writes them as
   one Parquet file of the version.

Between 2 and 3 the driver copies out each piece's rows itself, one piece at a
time, for the rows digest only (the same one the local engine computes while
writing), so the version's content hash is the local engine's for the same
inputs and options and is known before any file is written: every piece carries
it in its key-value metadata, and an identical version writes nothing. The
manifest is committed last as always. Ray is imported only here, inside
functions (it is an optional extra).

The warehouse and the scratch folder must be reachable under the same path
from every node (one machine, or a shared filesystem).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import pickle
import shutil
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from tracebank.transform.config import TransformConfig
from tracebank.transform.errors import TransformError, TransformUsageError
from tracebank.transform.inputs import TOKEN_COLUMNS, Chosen, load_inputs, require_silver, spill_tokens
from tracebank.transform.manifest import RowsDigest
from tracebank.transform.ray_probe import RAY_HINT, probe
from tracebank.transform.recipe import build_recipe
from tracebank.transform.rows import CallTokens, RowTokens
from tracebank.transform.version import TransformResult
from tracebank.transform.writer import OpenSplit, open_split, pieces, split_table
from tracebank.warehouse import layout
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.records import FileEntry
from tracebank.warehouse.storage import Storage


@dataclass(frozen=True)
class Spilled:
    """One collection's token lists in the scratch folder."""

    prompt_path: Path
    response_path: Path
    prompt_offsets: np.ndarray
    response_offsets: np.ndarray
    prompt_starts: np.ndarray | None

    def tokens(self) -> CallTokens:
        return CallTokens(
            self.prompt_offsets,
            self.response_offsets,
            prompt_path=self.prompt_path,
            response_path=self.response_path,
            prompt_starts=self.prompt_starts,
        )


def _spill_collection(row: dict[str, Any]) -> dict[str, Any]:
    """Ray task: the token spill of one collection (from the silver cache collect built)."""
    storage = Storage(Warehouse(Path(row["root"])))
    cid = row["cid"]
    require_silver(storage, cid)
    manifest = storage.current_silver(cid)
    assert manifest is not None
    folder = Path(row["scratch"]) / cid
    folder.mkdir(parents=True)
    parts = [lambda: storage.silver_batches(cid, "llm_calls", TOKEN_COLUMNS)]
    t = spill_tokens(parts, manifest.counts["llm_calls"], folder)
    assert isinstance(t.prompt_path, Path) and isinstance(t.response_path, Path)  # one part: one file each
    spilled = Spilled(t.prompt_path, t.response_path, *_offsets(t))
    return {"cid": cid, "spilled": pickle.dumps(spilled)}


def _offsets(t: CallTokens) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    return t.prompt_offsets, t.response_offsets, t.prompt_starts


class _Sources:
    """The spilled collections in load order; global call ``tok`` -> (collection, local index)."""

    def __init__(self, spilled: list[Spilled]) -> None:
        self.spilled = spilled
        self.bases = np.cumsum([0] + [len(s.prompt_offsets) - 1 for s in spilled])

    def gather(self, tok: np.ndarray) -> tuple[CallTokens, np.ndarray]:
        """In-memory tokens of the calls ``tok`` (global indices) and each one's local index there."""
        unique, local = np.unique(tok, return_inverse=True)
        which = np.searchsorted(self.bases, unique, side="right") - 1
        prompts: list[np.ndarray] = []
        responses: list[np.ndarray] = []
        for c in np.unique(which).tolist():
            ks = (unique[which == c] - self.bases[c]).tolist()
            s = self.spilled[c]
            t = s.tokens()
            with t.values() as (pv, rv):
                p_lo, p_hi = (bound.tolist() for bound in t.prompt_bounds(np.array(ks, np.int64)))
                ro = s.response_offsets
                prompts += [np.array(pv[a:b]) for a, b in zip(p_lo, p_hi, strict=True)]
                responses += [np.array(rv[ro[k] : ro[k + 1]]) for k in ks]
        return _flat(prompts, responses), local.astype(np.int64)


def _flat(prompts: list[np.ndarray], responses: list[np.ndarray]) -> CallTokens:
    def one(parts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        offsets = np.zeros(len(parts) + 1, np.int64)
        np.cumsum([len(p) for p in parts], out=offsets[1:])
        values = np.concatenate(parts).astype(np.int32) if parts else np.zeros(0, np.int32)
        return values, offsets

    pv, po = one(prompts)
    rv, ro = one(responses)
    return CallTokens(po, ro, pv, rv)


def _piece_rows(job: dict[str, Any]) -> tuple[pl.DataFrame, RowTokens]:
    """One piece's planned rows and their tokens, gathered from the scratch files."""
    sources: _Sources = job["sources"]
    tokens, local = sources.gather(job["tok"])
    source = RowTokens(lambda: tokens, local, job["prompt_len"], job["response_len"])
    return pl.read_ipc(io.BytesIO(job["rows"])), source


def _write_piece(row: dict[str, Any]) -> dict[str, Any]:
    """Ray task: gather one piece's calls, copy out its rows, write them as one Parquet file."""
    job = pickle.loads(row["job"])
    rows, source = _piece_rows(job)
    storage = Storage(Warehouse(Path(job["root"])))
    with contextlib.ExitStack() as stack:  # the provenance is whole: closed at once
        opened = open_split(
            stack, storage, Path(job["folder"]), job["split"], rows, source, job["name"], job["provenance"]
        )
    return {"index": job["index"], "entries": pickle.dumps(opened.entries())}


def _piece_job(
    storage: Storage,
    index: int,
    path: Path,
    split: str,
    piece: pl.DataFrame,
    source: RowTokens,
    sources: _Sources,
) -> dict[str, Any]:
    """What a worker needs for one piece: its rows' chains renumbered over just their calls."""
    first = piece.get_column("first").to_numpy()
    last = piece.get_column("last").to_numpy()
    sizes = last - first + 1
    positions = np.concatenate([np.arange(a, b + 1) for a, b in zip(first, last, strict=True)])
    new_first = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    rows = piece.with_columns(
        pl.Series("first", new_first, dtype=pl.Int64),
        pl.Series("last", new_first + sizes - 1, dtype=pl.Int64),
    )
    sink = rows.write_ipc(None)
    return {
        "index": index,
        "root": str(storage.wh.root),
        "folder": str(path.parent),
        "name": path.name,
        "split": split,
        "rows": sink.getvalue(),
        "tok": source.tok[positions],
        "prompt_len": source.prompt_len[positions],
        "response_len": source.response_len[positions],
        "sources": sources,
    }


def _digest(jobs: Iterable[dict[str, Any]]) -> tuple[str, int | None]:
    """The rows digest of the pieces and their largest input id: each piece's rows copied out
    here, in order, one piece at a time, exactly as its worker will."""
    digest = RowsDigest()
    max_ids: list[int] = []
    for job in jobs:
        rows, source = _piece_rows(job)
        table, max_id = split_table(rows, source)
        digest.update(table)
        if max_id is not None:
            max_ids.append(max_id)
        del table, source
    return digest.hexdigest(), max(max_ids) if max_ids else None


#: Pieces (of ~4 M tokens each) written by one Ray Data job; the driver holds this many jobs at once.
PIECES_PER_JOB = 16


def _ray_writer(sources: _Sources) -> Any:
    import ray.data

    def open_(
        source: RowTokens,
        stack: contextlib.ExitStack[Any],
        storage: Storage,
        folder: Path,
        split: str,
        frame: pl.DataFrame,
        provenance: dict[str, Any],
    ) -> OpenSplit:
        parts = pieces(frame)

        def job(i: int) -> dict[str, Any]:
            path = folder / layout.split_file(split, i)
            return _piece_job(storage, i, path, split, parts[i], source, sources)

        # Jobs are built when needed, a batch at a time: the driver never holds every piece's.
        digest, max_id = _digest(job(i) for i in range(len(parts)))
        written: list[FileEntry] = []

        def write(fields: dict[str, Any]) -> None:
            for start in range(0, len(parts), PIECES_PER_JOB):
                batch = range(start, min(start + PIECES_PER_JOB, len(parts)))
                stamped = {**provenance, **fields}
                items = [{"job": pickle.dumps({**job(i), "provenance": stamped})} for i in batch]
                out = ray.data.from_items(items).map(_write_piece).take_all()
                for r in sorted(out, key=lambda r: r["index"]):
                    written.extend(pickle.loads(r["entries"]))

        def entries() -> list[FileEntry]:
            assert written, "the pieces are written when the content hash is known"
            return written

        return OpenSplit(digest, max_id, write, entries)

    return open_


def connect(address: str | None) -> None:
    """Join the cluster at ``address`` (else ``$RAY_ADDRESS``, else a local one started here)."""
    try:
        import ray
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("ray"):
            raise
        raise TransformUsageError(
            "--engine ray needs Ray", "install it with `pip install 'tracebank[ray]'`"
        ) from exc
    address = address or os.environ.get("RAY_ADDRESS") or None
    probe(address)  # ray.init waits minutes on an address where nothing listens
    if ray.is_initialized():
        return
    try:
        # stdout carries results only: the cluster's own log lines (a gcs_server's connection
        # notices, workers' prints) are not forwarded to this process at all.
        ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise TransformError(
            f"cannot reach the Ray cluster at {address or 'a new local one'}: {str(exc).splitlines()[0]}",
            RAY_HINT,
        ) from exc


def build_recipe_on_ray(wh: Warehouse, config: TransformConfig, chosen: Chosen) -> TransformResult:
    """The recipe with the silver caches and row writing on a Ray cluster; same version, same hash."""
    connect(config.address)
    import ray.data

    scratch = wh.tmp_dir / f"ray-{uuid.uuid4().hex[:12]}"
    try:
        # first: a missing silver cache (or a bad --agent-key function) fails before any Ray job
        inputs = load_inputs(wh, chosen, config.agent_key)
        items = [{"root": str(wh.root), "cid": cid, "scratch": str(scratch)} for cid, _ in chosen]
        done = {r["cid"]: r for r in ray.data.from_items(items).map(_spill_collection).take_all()}
        sources = _Sources([pickle.loads(done[cid]["spilled"]) for cid, _ in chosen])
        return build_recipe(
            wh, config, chosen, inputs, cache(lambda: _all_tokens(sources)), _ray_writer(sources)
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _all_tokens(sources: _Sources) -> CallTokens:
    """Every call's tokens on the driver (only ``--merge trajectory`` and ``--dedup`` need them)."""
    total = int(sources.bases[-1])
    tokens, local = sources.gather(np.arange(total, dtype=np.int64))
    assert np.array_equal(local, np.arange(total))
    return tokens
