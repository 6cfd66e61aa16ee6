"""Silver tables of committed collections: built right after each collect, rebuilt on request.

The silver tables (llm_calls, rewards, messages; see ``collect.silver``) are
derived from a collection's bronze spans once and cached beside it, so SQL and
``transform`` read them without parsing span attributes again.
When several collections need a build, they are built side by side in worker
processes (``collect.silver_workers``).
"""

from __future__ import annotations

from tracebank.collect.errors import UnknownCollectionError
from tracebank.collect.silver_workers import build_in_workers, build_one
from tracebank.core import memory
from tracebank.core.machine import usable_cores
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.records import SilverManifest
from tracebank.warehouse.storage import Storage

# At most this many build processes: each holds one collection's batch (~430 MiB peak on the
# scale bench), so the cap bounds the memory of a machine with many cores.
MAX_SILVER_WORKERS = 8


def _chosen(wh: Warehouse, wanted: tuple[str, ...]) -> list[str]:
    committed = [folder.name for folder, _ in Storage(wh).collections()]
    if not committed:
        raise UnknownCollectionError(
            f"no committed collection in {wh.root}", "run `tracebank collect --store URL` first"
        )
    missing = [c for c in wanted if c not in committed]
    if missing:
        raise UnknownCollectionError(
            f"no committed collection {missing[0]!r} in {wh.root}",
            f"known collections: {', '.join(committed)}",
        )
    return sorted(set(wanted)) if wanted else committed


def build_silver(
    wh: Warehouse, collections: tuple[str, ...] = (), force: bool = False, workers: int | None = None
) -> list[SilverManifest]:
    """Build the silver tables of the chosen collections (default: all), oldest first.

    A current cache is reused unless ``force``; a missing or stale one (another
    SILVER_VERSION) is built, in ``workers`` processes when there are several
    (default: one per core, at most MAX_SILVER_WORKERS). Returns the committed
    manifests, in collection order.
    """
    wh.check_format()
    memory.fix_mmap_threshold()
    storage = Storage(wh)
    chosen = _chosen(wh, collections)
    cached = {cid: None if force else storage.current_silver(cid) for cid in chosen}
    todo = [cid for cid in chosen if cached[cid] is None]
    n = min(len(todo), workers or usable_cores(), MAX_SILVER_WORKERS)
    built = build_in_workers(wh, todo, force, n) if n > 1 else [build_one(wh, cid, force) for cid in todo]
    fresh = dict(zip(todo, built, strict=True))
    return [cached[cid] or fresh[cid] for cid in chosen]


def silver_summary(manifest: SilverManifest) -> str:
    """``N llm calls (U with token ids), R rewards, M messages``: a silver cache in one line."""
    c = manifest.counts
    text = f", {c['text_calls']} text only" if c.get("text_calls") else ""
    return (
        f"{c['llm_calls']} llm calls ({c['usable_calls']} with token ids{text}), "
        f"{c['rewards']} rewards, {c['messages']} messages"
    )
