"""Repairing attempts stored twice (by collects that ran at once before collect took turns).

The oldest collection that holds an attempt keeps it. Every later collection holding a copy is
rewritten without the copies as a new collection (its manifest notes which one it replaces),
committed, and only then retired; one holding nothing else is just retired. A reader sees the
duplicates, or the repaired warehouse, never a mix with an attempt missing. Runs under the
same claim as collect, so no collect writes meanwhile.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from tracebank.collect.collector import collect_claim
from tracebank.core import events as ev
from tracebank.core.events import OnEvent
from tracebank.warehouse import layout
from tracebank.warehouse.claims import Owner, claimed
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.records import CollectionManifest
from tracebank.warehouse.schemas import BRONZE
from tracebank.warehouse.storage import Storage, read_table

Pair = tuple[str, str]


@dataclass
class RepairResult:
    """What a repair changed."""

    duplicates: int = 0
    """Attempts that were stored more than once (each counted once per extra copy)."""
    replaced: list[tuple[str, str | None]] = field(default_factory=list)
    """(retired collection, the collection that replaces it or None when nothing was left)."""

    def lines(self) -> list[str]:
        """What ``tracebank repair-duplicates`` prints: each collection replaced, then the summary."""
        replaced = [
            f"repaired {old}: " + (f"replaced by {new}" if new else "held only duplicates, retired")
            for old, new in self.replaced
        ]
        return [*replaced, self.summary()]

    def summary(self) -> str:
        if not self.duplicates:
            return "repair: no attempt is stored twice"
        return (
            f"repair: removed {self.duplicates} duplicate attempt(s) from {len(self.replaced)} collection(s)"
        )


def _pairs(table: pa.Table) -> list[Pair]:
    return list(
        zip(table.column("rollout_id").to_pylist(), table.column("attempt_id").to_pylist(), strict=True)
    )


def _keep(table: pa.Table, drop: set[Pair]) -> pa.Table:
    mask = pa.array([pair not in drop for pair in _pairs(table)], pa.bool_())
    return table.filter(mask)


def find_duplicates(wh: Warehouse) -> list[tuple[Path, CollectionManifest, set[Pair]]]:
    """Each collection holding attempts an older collection already holds, with those attempts."""
    seen: set[Pair] = set()
    out = []
    storage = Storage(wh)
    for folder, manifest in storage.collections():
        pairs = set(
            _pairs(read_table(storage.files_of(folder, manifest, "attempts"), ["rollout_id", "attempt_id"]))
        )
        repeated = pairs & seen
        if repeated:
            out.append((folder, manifest, repeated))
        seen |= pairs
    return out


def _rewrite(
    storage: Storage, folder: Path, manifest: CollectionManifest, drop: set[Pair], new_id: str
) -> str | None:
    tables = {
        name: read_table(storage.files_of(folder, manifest, name), schema=BRONZE[name]) for name in BRONZE
    }
    attempts = _keep(tables["attempts"], drop)
    if attempts.num_rows == 0:
        return None
    kept_rollouts = pa.array(sorted(set(attempts.column("rollout_id").to_pylist())), pa.string())
    rewritten = {
        "rollouts": tables["rollouts"].filter(
            pc.is_in(tables["rollouts"].column("rollout_id"), kept_rollouts)
        ),
        "attempts": attempts,
        "spans": _keep(tables["spans"], drop),
    }
    target = storage.wh.collection_dir(new_id)
    files = []
    for name, table in rewritten.items():
        ids = pa.array([new_id] * table.num_rows, pa.string())
        table = table.set_column(table.schema.get_field_index("collection_id"), "collection_id", ids)
        files.append(storage.write_table(target, layout.bronze_file(name), table, name))
    counts = {
        **manifest.counts,
        "rollouts": rewritten["rollouts"].num_rows,
        "attempts": attempts.num_rows,
        "spans": rewritten["spans"].num_rows,
    }
    extra = {**manifest.extra, "repaired_from": manifest.collection_id, "duplicates_removed": len(drop)}
    new = dataclasses.replace(manifest, collection_id=new_id, files=files, counts=counts, extra=extra)
    storage.commit_collection(target, new)
    return new_id


def repair_duplicates(
    wh: Warehouse, new_id: Callable[[], str], on_event: OnEvent | None = None
) -> RepairResult:
    """Keep one copy of every attempt stored more than once (see the module docstring)."""
    storage = Storage(wh.init())
    result = RepairResult()

    def tell(holder: Owner) -> None:
        if on_event is not None:
            on_event(ev.WaitingForWarehouse(holder.describe()))

    with claimed(collect_claim(wh), Owner.current("repair-duplicates"), wait=True, on_wait=tell):
        for folder, manifest, drop in find_duplicates(wh):
            replacement = _rewrite(storage, folder, manifest, drop, new_id())
            storage.retire_collection(folder)
            result.duplicates += len(drop)
            result.replaced.append((manifest.collection_id, replacement))
    return result
