"""`tracebank gc`: remove what crashed or killed writers left behind, and say what it freed.

What a writer killed at any point can leave, and what gc does about it:
- a run record still saying ``running`` whose process is gone: written as failed ("process gone");
- a run's scratch (``tmp/train-<run_id>``, often ~10x the dataset) and its staging model next to
  its ``--output`` (``.<name>.tmp-<run_id>``, half-saved): removed once the run is not running;
- commit temp files (``<name>.tmp-<random>``), files of a replaced silver cache (kept a while
  for readers of the old manifest), other scratch under ``tmp/``, and folders of
  collections / silver caches / dataset versions that never got a manifest: removed once they are
  older than ``min_age_s`` (a writer still working on them is younger than that), and so are
  retired collections and the silver caches of collections that are gone;
- claims whose process is gone.
Committed files, manifests and finished models are never touched.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from tracebank.warehouse.claims import read_claim, release
from tracebank.warehouse.commit import TMP_MARK
from tracebank.warehouse.errors import CorruptFileError
from tracebank.warehouse.layout import MANIFEST, Warehouse
from tracebank.warehouse.mirror import PULLED
from tracebank.warehouse.objectstore import StoredFile
from tracebank.warehouse.records import (
    CollectionManifest,
    DatasetManifest,
    Manifest,
    RunRecord,
    SilverManifest,
)
from tracebank.warehouse.remote_gc import sweep_remote
from tracebank.warehouse.storage import Storage, read_manifest, settle_run

#: A temp file or uncommitted folder younger than this may still be a live writer's.
DEFAULT_MIN_AGE_S = 3600.0


def staging_dir(output: Path, run_id: str) -> Path:
    """Where train writes a run's model before moving it to ``output`` (beside it, same file system)."""
    return output.parent / f".{output.name}{TMP_MARK}{run_id}"


def scratch_dir(wh: Warehouse, run_id: str) -> Path:
    """A run's scratch folder inside the warehouse."""
    return wh.tmp_dir / f"train-{run_id}"


def output_claim(output: Path) -> Path:
    """The claim that lets only one run at a time write ``output``."""
    return output.parent / f".{output.name}.claim"


@dataclass
class GcReport:
    """What one gc pass removed (or, dry, would remove)."""

    removed: list[tuple[str, int]] = field(default_factory=list)
    """Each removed path (or object store URI) and the bytes it held."""
    runs_failed: list[str] = field(default_factory=list)
    """Run ids written as failed because their process is gone."""

    @property
    def freed(self) -> int:
        return sum(size for _, size in self.removed)

    def summary(self, dry_run: bool = False) -> str:
        verb = "would free" if dry_run else "freed"
        runs = f"; {len(self.runs_failed)} run(s) marked failed (process gone)" if self.runs_failed else ""
        return f"gc: {verb} {_human(self.freed)} in {len(self.removed)} item(s){runs}"


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _size(path: Path) -> int:
    if path.is_file() or path.is_symlink():
        return path.lstat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _age_s(path: Path, now: float) -> float:
    try:
        return now - path.lstat().st_mtime
    except FileNotFoundError:
        return 0.0


class _Sweeper:
    def __init__(self, dry_run: bool) -> None:
        self.dry_run = dry_run
        self.report = GcReport()
        self.seen: set[Path] = set()

    def remove(self, path: Path) -> None:
        if path in self.seen or not (path.exists() or path.is_symlink()):
            return
        self.seen.add(path)
        self.report.removed.append((str(path), _size(path)))
        if self.dry_run:
            return
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)

    def remove_remote(self, wh: Warehouse, f: StoredFile) -> None:
        self.report.removed.append((f"{wh.remote.uri}/{f.path}", f.size))
        if not self.dry_run:
            wh.remote.delete(f.path)


def _settle_runs(wh: Warehouse, sweep: _Sweeper) -> set[str]:
    """Write runs whose process is gone as failed; the ids of runs still running."""
    storage = Storage(wh)
    if storage.remote:
        storage.runs()  # bring the store's run records into the mirror first
    running: set[str] = set()
    for folder in sorted(p for p in wh.runs_dir.iterdir() if p.is_dir()) if wh.runs_dir.exists() else []:
        path = folder / "run.json"
        try:
            record = RunRecord.from_json(json.loads(path.read_text()), str(path))
        except (OSError, ValueError, CorruptFileError):
            continue  # `tracebank verify` reports unreadable records
        settled = settle_run(record)
        if settled.status == "running":
            running.add(folder.name)
            continue
        if record.status == "running":
            sweep.report.runs_failed.append(folder.name)
            if not sweep.dry_run:
                storage.write_run(dataclasses.replace(settled, finished_at=_now()))
        _sweep_run_leftovers(wh, folder.name, record.output_dir, sweep)
    return running


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _sweep_run_leftovers(wh: Warehouse, run_id: str, output_dir: str, sweep: _Sweeper) -> None:
    """A finished or dead run's scratch, staging model, half-replaced old output and claim."""
    out = Path(output_dir)
    sweep.remove(staging_dir(out, run_id))
    for old in out.parent.glob(f".{out.name}.old-*") if out.parent.exists() else ():
        sweep.remove(old)
    claim = output_claim(out)
    held = read_claim(claim)
    if held is not None and held[0].alive() is False and not sweep.dry_run:
        release(claim, held[0])
    sweep.remove(scratch_dir(wh, run_id))


def _sweep_tmp(wh: Warehouse, running: set[str], sweep: _Sweeper, now: float, min_age_s: float) -> None:
    if not wh.tmp_dir.exists():
        return
    for entry in wh.tmp_dir.iterdir():
        if entry.name.startswith("train-") and entry.name.removeprefix("train-") in running:
            continue
        if _age_s(entry, now) >= min_age_s:
            sweep.remove(entry)


def commit_folders(wh: Warehouse) -> list[tuple[Path, type[Manifest]]]:
    """Every folder that is, or was meant to become, a commit, with the manifest kind it takes."""
    folders: list[tuple[Path, type[Manifest]]] = []
    for parent, kind in ((wh.collections_dir, CollectionManifest), (wh.silver_dir, SilverManifest)):
        folders += [(p, kind) for p in parent.iterdir() if p.is_dir()] if parent.exists() else []
    if wh.datasets_dir.exists():
        for name in (p for p in wh.datasets_dir.iterdir() if p.is_dir()):
            folders += [(p, DatasetManifest) for p in name.iterdir() if p.is_dir()]
    return folders


def _sweep_uncommitted(wh: Warehouse, sweep: _Sweeper, now: float, min_age_s: float) -> None:
    for folder, kind in commit_folders(wh):
        try:
            manifest = read_manifest(folder, kind)
        except CorruptFileError:
            continue  # damaged, not abandoned: `tracebank verify` names it, gc leaves it
        if manifest is not None:
            # Temp files, and files of a replaced silver cache that no manifest lists any more.
            listed = {MANIFEST, PULLED, *(e.path for e in manifest.files)}
            for path in folder.iterdir():
                if path.name not in listed and _age_s(path, now) >= min_age_s:
                    sweep.remove(path)
        elif _age_s(folder, now) >= min_age_s and all(_age_s(p, now) >= min_age_s for p in folder.rglob("*")):
            sweep.remove(folder)


def _sweep_orphan_silver(wh: Warehouse, sweep: _Sweeper, now: float, min_age_s: float) -> None:
    """Silver caches of collections that are no longer committed (retired by a repair)."""
    if not wh.silver_dir.exists():
        return
    for folder in wh.silver_dir.iterdir():
        if not folder.is_dir() or _age_s(folder / MANIFEST, now) < min_age_s:
            continue
        try:
            committed = read_manifest(wh.collections_dir / folder.name, CollectionManifest) is not None
        except CorruptFileError:
            continue  # a damaged collection manifest: verify names it; its silver stays
        if not committed:
            sweep.remove(folder)


def gc(wh: Warehouse, min_age_s: float = DEFAULT_MIN_AGE_S, dry_run: bool = False) -> GcReport:
    """Remove what crashed writers left in ``wh`` (see the module docstring); what it freed."""
    wh.check_format()
    sweep = _Sweeper(dry_run)
    now = time.time()
    running = _settle_runs(wh, sweep)
    _sweep_tmp(wh, running, sweep, now, min_age_s)
    _sweep_uncommitted(wh, sweep, now, min_age_s)
    _sweep_orphan_silver(wh, sweep, now, min_age_s)
    if wh.remote is not None:
        sweep_remote(wh, lambda f: sweep.remove_remote(wh, f), now, min_age_s)
    for tmp in wh.root.glob(f"*{TMP_MARK}*"):  # FORMAT.json's temp file
        if _age_s(tmp, now) >= min_age_s:
            sweep.remove(tmp)
    return sweep.report
