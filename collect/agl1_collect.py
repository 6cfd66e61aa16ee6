"""collect for Agent Lightning 1.0: commit the spool (or a live ``agl-server``) as one collection.

The spool is what the trainer hook (``agl1_hook``) or the REST reader saved.
Committing is idempotent: entries whose (rollout, attempt) a committed collection
already holds are skipped, and spool files are removed only after the manifest
that holds them is committed. A collect killed at any point therefore leaves
either nothing committed (the spool intact: the rerun commits it) or a committed
collection plus spool files that the rerun recognises and removes; nothing is
lost or committed twice.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

from tracebank.collect import silver
from tracebank.collect.agl1_bronze import bronze_tables
from tracebank.collect.agl1_rest import Agl1Rest, spool_from_server
from tracebank.collect.agl1_spool import SpoolEntry, read_spool, remove_entries
from tracebank.collect.collector import CollectResult, _versions, already_collected, new_collection_id
from tracebank.collect.config import CollectConfig
from tracebank.collect.redact import Redactor
from tracebank.collect.writer import write_table
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.records import CollectionManifest
from tracebank.warehouse.storage import Storage

SOURCE = "agl1"


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


def collect_spool(
    spool: Path, wh: Warehouse, config: CollectConfig | None = None, source: str | None = None
) -> CollectResult:
    """Commit the spool's new entries as one collection; remove the entries the warehouse now holds."""
    config = (config or CollectConfig()).validate()
    t_start = time.perf_counter()
    created_at = dt.datetime.now(dt.UTC)
    wh.init()
    done = already_collected(wh)
    entries = read_spool(spool)
    wanted = [e for e in entries if _keep(e, config)]
    new = [e for e in wanted if e.key not in done]
    redactor = Redactor() if config.redact else None
    counts: dict[str, int] = {
        "rollouts": len(new),
        "attempts": len(new),
        "spans": 0,
        "events": 0,
        "skipped": len(wanted) - len(new),
        "evicted": 0,
        "filtered_out": len(entries) - len(wanted),
        "incomplete_events": sum(not e.data.get("events_complete") for e in new),
    }
    cid = folder = None
    if new:
        cid = new_collection_id(created_at)
        folder = wh.collection_dir(cid)
        tables = bronze_tables(new, cid, redactor)
        counts["events"] = tables["events"].num_rows
        storage = Storage(wh)
        files = [write_table(storage, folder, name, table) for name, table in tables.items()]
        manifest = CollectionManifest(
            collection_id=cid,
            created_at=created_at.isoformat(),
            finished_at=dt.datetime.now(dt.UTC).isoformat(),
            tag=config.tag,
            store_url=source or f"spool:{spool}",
            source=SOURCE,
            filters=config.filters(),
            counts=counts,
            seconds={"total": round(time.perf_counter() - t_start, 3)},
            redaction={"enabled": config.redact, "values_redacted": redactor.count if redactor else 0},
            warnings=_warnings(counts),
            versions=_versions(),
            extra=dict(config.extra),
            files=files,
        )
        storage.commit_collection(folder, manifest)
    # Only now: every wanted entry is in a committed collection (this one or an earlier one).
    remove_entries(wanted)
    seconds = {"total": round(time.perf_counter() - t_start, 3)}
    result = CollectResult(cid, folder, source or f"spool:{spool}", counts, seconds, [], _warnings(counts))
    if cid is not None and config.silver:
        result.silver = silver.build_silver(wh, cid)
    return result


def _warnings(counts: dict[str, int]) -> list[str]:
    if not counts["incomplete_events"]:
        return []
    return [
        f"{counts['incomplete_events']} failed rollouts were spooled without their events "
        "(the hook had no TRACEBANK_AGL_URL to ask the server)"
    ]


def collect_server(
    url: str, wh: Warehouse, config: CollectConfig | None = None, key: str = ""
) -> tuple[CollectResult, int]:
    """Spool what finished on a live ``agl-server`` since the last run, then commit it.

    Returns the collect result and how many finished rollouts the server had already
    deleted (lost to this reader; the hook does not miss them).
    """
    read = spool_from_server(Agl1Rest(url, key), rest_spool_dir(wh))
    result = collect_spool(rest_spool_dir(wh), wh, config, source=url)
    result.counts["missed"] = read.missed
    if read.missed:
        result.warnings.append(
            f"{read.missed} finished rollouts were deleted from the server before collect read them "
            "(the 1.0 trainer deletes each one right after reading it); load tracebank's hook in the trainer"
        )
    if read.reset:
        result.warnings.append(
            "the server's completion log restarted (a restarted agl-server); read it from 0"
        )
    return result, read.missed


def detect_source(url: str, key: str = "") -> str:
    """``agl1`` when ``url`` is an Agent Lightning 1.0 ``agl-server``, else ``agl03`` (an ``agl store``)."""
    return SOURCE if Agl1Rest(url, key, timeout=5.0).is_agl1() else "agl03"
