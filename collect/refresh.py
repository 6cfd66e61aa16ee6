"""Silver tables of committed collections: built right after each collect, rebuilt on request.

The silver tables (llm_calls, rewards, messages; see ``collect.silver``) are
derived from a collection's bronze spans once and cached beside it, so SQL and
``transform`` read them without parsing span attributes again.
"""

from __future__ import annotations

from tracebank.collect.errors import UnknownCollectionError
from tracebank.warehouse import memory
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.records import SilverManifest
from tracebank.warehouse.storage import Storage


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
    wh: Warehouse, collections: tuple[str, ...] = (), force: bool = False
) -> list[SilverManifest]:
    """Build the silver tables of the chosen collections (default: all), oldest first.

    A current cache is reused unless ``force``; a missing or stale one (another
    SILVER_VERSION) is built. Returns the committed manifests.
    """
    wh.check_format()
    memory.fix_mmap_threshold()
    built = []
    storage = Storage(wh)
    for cid in _chosen(wh, collections):
        cached = None if force else storage.current_silver(cid)
        if cached is not None:
            built.append(cached)
            continue
        # Imported only to build: DuckDB's import alone is ~0.1 s of every warm `tracebank transform`.
        from tracebank.collect import silver

        built.append(silver.build_silver(wh, cid, force=force))
        memory.release()  # else each collection's peak starts from the last one's leftovers
    return built


def silver_summary(manifest: SilverManifest) -> str:
    """``N llm calls (U with token ids), R rewards, M messages``: a silver cache in one line."""
    c = manifest.counts
    return (
        f"{c['llm_calls']} llm calls ({c['usable_calls']} with token ids), "
        f"{c['rewards']} rewards, {c['messages']} messages"
    )
