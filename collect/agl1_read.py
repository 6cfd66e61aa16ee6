"""Reading Agent Lightning 1.0 into a Batch: the spool, or a live ``agl-server`` through the spool.

The spool is what the trainer hook (``agl1_hook``) or the REST reader saved. Spool
files are removed only after the manifest of the collection that holds them is
committed (the batch's ``on_commit``), and entries whose (rollout, attempt) a committed
collection already holds are skipped. A collect killed at any point therefore leaves
either nothing committed (the spool intact: the rerun commits it) or a committed
collection plus spool files that the rerun recognises and removes; nothing is lost or
committed twice.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tracebank.collect.agl1_bronze import attempt_row, event_rows, rollout_row
from tracebank.collect.agl1_rest import Agl1Rest, spool_from_server
from tracebank.collect.agl1_spool import SpoolEntry, load_entry, reject, remove_entries, spool_files
from tracebank.collect.batch import Batch, Progress
from tracebank.collect.config import CollectConfig
from tracebank.warehouse.location import Warehouse


def rest_spool_dir(wh: Warehouse) -> Path:
    """Where the REST reader spools a server's rollouts (and keeps its cursor) before commit."""
    return wh.root / "spool" / "agl1-rest"


def _keep(entry: SpoolEntry, config: CollectConfig) -> bool:
    data = entry.data
    mode = "train" if (data.get("rollout") or {}).get("is_train", True) else "val"
    return (
        data.get("state") in config.statuses
        and (config.mode is None or config.mode == mode)
        and (not config.rollout_ids or entry.key[0] in config.rollout_ids)
    )


async def read_spool_folder(
    folder: Path, batch: Batch, config: CollectConfig, progress: Progress | None
) -> None:
    """Hand the spool's entries that match the filters to ``batch``, a file at a time (memory
    bounded by the largest file); move bad files aside with a warning each; once the batch is
    committed, remove the entries it took from the spool (the warehouse holds every one then)."""
    paths = await asyncio.to_thread(spool_files, folder)
    taken: list[Path] = []
    for done, path in enumerate(paths, 1):
        entry = await asyncio.to_thread(load_entry, path)
        if isinstance(entry, str):
            where = await asyncio.to_thread(reject, path)
            batch.note("rejected", 1)
            batch.warn(f"spool file {path.name} rejected: {entry}; {where}")
        elif offer_entry(entry, batch, config):
            taken.append(path)
        if progress is not None:
            progress(done, len(paths))
    batch.on_commit(lambda: remove_entries(taken))


def offer_entry(entry: SpoolEntry, batch: Batch, config: CollectConfig) -> bool:
    """Hand one checked 1.0 entry to ``batch`` (the batch's skip rule drops one it holds already);
    False when ``config``'s filters leave it out (counted as filtered out)."""
    if not _keep(entry, config):
        batch.note("filtered_out", 1)
        return False
    if batch.wants(*entry.key):
        rows = event_rows(entry)
        complete = bool(entry.data.get("events_complete"))
        batch.add_events(rollout_row(entry), attempt_row(entry, rows), rows, complete)
    return True


async def read_server(
    url: str, key: str, batch: Batch, config: CollectConfig, progress: Progress | None
) -> None:
    """Spool what finished on a live ``agl-server`` since the last run, then read that spool."""
    read = await asyncio.to_thread(spool_from_server, Agl1Rest(url, key), rest_spool_dir(batch.wh))
    await read_spool_folder(rest_spool_dir(batch.wh), batch, config, progress)
    batch.note("missed", read.missed)
    if read.missed:
        batch.warn(
            f"{read.missed} finished rollouts were deleted from the server before collect read them "
            "(the 1.0 trainer deletes each one right after reading it); load tracebank's hook in the trainer"
        )
    if read.reset:
        batch.warn("the server's completion log restarted (a restarted agl-server); read it from 0")


def is_agl1_server(url: str, key: str = "") -> bool:
    """Whether ``url`` is an Agent Lightning 1.0 ``agl-server`` (else an ``agl store``, 0.3)."""
    return Agl1Rest(url, key, timeout=5.0).is_agl1()
