"""`tracebank gc`: remove what crashed or killed writers left behind, and say what it freed.

Written once over the warehouse's store keys, so a folder and a bucket are swept alike. What a
writer killed at any point can leave, and what gc does about it:
- a run record still saying ``running`` whose process is gone: written as failed ("process gone");
- a run's scratch (``tmp/train-<run_id>``: checkpoints, caches, often ~10x the dataset): removed
  once the run is not running (one holding a finished checkpoint, for `train --resume`, once it is
  older than ``min_age_s`` too);
- beside a run's ``--output``, its staging model (``.<name>.tmp-<run_id>``, half-saved) and the
  model it was replacing (``.<name>.old-<run_id>``): removed only when the marker inside names
  the run (:mod:`tracebank.core.outputs` writes it; the record's ``output_dir``, which anyone
  with write access to the warehouse can plant, only says where to look), the process that made
  it is seen gone on this host, the run is not running, and the folder is older than ``min_age_s``;
- files a committed folder's manifest does not list (commit temp files, the files of a replaced
  silver cache kept a while for readers of the old manifest), folders of collections / silver
  caches / dataset versions that never got a manifest (a reserved version never committed), the
  silver caches of retired collections, other scratch under ``tmp/``: removed once every file
  concerned is older than ``min_age_s`` (a writer still working on them is younger than that);
- claims nobody holds any more.
Committed files, manifests and finished models are never touched. A top-level folder that is a
symlink is refused in one line, and nothing is removed through a symlink (one in its own place is
removed itself, never followed). A dry run goes through the same steps, so it lists exactly what
a real one removes.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import shutil
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from tracebank.core.errors import CorruptFileError, UsageError
from tracebank.core.outputs import aside_name, leftover_of
from tracebank.warehouse import layout
from tracebank.warehouse.bytestore import StoredFile, no_link_between
from tracebank.warehouse.claims import Claim, Owner
from tracebank.warehouse.layout import DEFAULT_MIN_AGE_S, CommitFolder
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.storage import MANIFEST_KINDS, Storage, parse_manifest, settle_run


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
    if path.is_symlink() or not path.is_dir():
        return path.lstat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _age_s(path: Path, now: float) -> float:
    try:
        return now - path.lstat().st_mtime
    except FileNotFoundError:
        return 0.0


class _Sweeper:
    """Removes what gc found, or (dry) only lists it: both go through :meth:`_remove`, so a dry
    run lists exactly what a real one removes."""

    def __init__(self, wh: Warehouse, dry_run: bool) -> None:
        self.wh, self.dry_run = wh, dry_run
        self.report = GcReport()
        self.seen: set[Path] = set()

    def remove_path(self, path: Path) -> None:
        """Remove a local file or folder of the warehouse outside the committed folders (scratch,
        temp files); never one reached through a symlink."""
        if no_link_between(self.wh.root, path):
            self._remove(path)

    def remove_leftover(self, path: Path) -> None:
        """Remove a run's leftover beside its model folder, outside the warehouse: the caller has
        checked its marker; here, that no symlink leads to it."""
        if path.is_absolute() and no_link_between(Path(path.anchor), path):
            self._remove(path)

    def unlinked(self, key: str) -> bool:
        """Whether the local file of ``key`` is reached with no symlink (a folder store follows a
        symlinked folder it is asked to list; below the top-level folders, gc leaves those alone)."""
        return no_link_between(self.wh.root, self.wh.root / key)

    def _remove(self, path: Path) -> None:
        if path in self.seen or not (path.exists() or path.is_symlink()):
            return
        self.seen.add(path)
        self.report.removed.append((str(path), _size(path)))
        if self.dry_run:
            return
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)  # never follows a link inside (fd-based on Linux)
        else:
            path.unlink(missing_ok=True)

    def remove_keys(self, label: str, files: list[StoredFile]) -> None:
        """Remove these keys of the store, reported as one item called ``label``."""
        if not all(self.unlinked(f.path) for f in files):
            return
        self.report.removed.append((f"{self.wh.store.uri}/{label}", sum(f.size for f in files)))
        if not self.dry_run:
            for f in files:
                self.wh.store.delete(f.path)


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _settle_runs(wh: Warehouse, sweep: _Sweeper, min_age_s: float) -> set[str]:
    """Write runs whose process is gone as failed; the ids of runs still running."""
    storage = Storage(wh)
    running: set[str] = set()
    for run_id in storage.run_ids():
        try:
            record = storage.read_run(run_id, settle=False)
        except (CorruptFileError, UsageError):
            continue  # `tracebank verify` reports unreadable records
        if record is None:
            continue
        settled = settle_run(record)
        if settled.status == "running":
            running.add(run_id)
            continue
        if record.status == "running":
            sweep.report.runs_failed.append(run_id)
            if not sweep.dry_run:
                storage.write_run(dataclasses.replace(settled, finished_at=_now()))
        _sweep_run_leftovers(wh, run_id, record.output_dir, sweep, min_age_s)
    return running


def _sweep_run_leftovers(
    wh: Warehouse, run_id: str, output_dir: object, sweep: _Sweeper, min_age_s: float
) -> None:
    """A finished or dead run's scratch, staging model and half-replaced old output (``run_id``
    is its folder's name, not what the record says). The scratch holds a failed run's checkpoints
    (what `train --resume` continues from): it goes only once it is older than ``min_age_s``,
    like every other leftover a writer may still want."""
    now = time.time()
    for leftover in _model_leftovers(run_id, output_dir, now, min_age_s):
        sweep.remove_leftover(leftover)
    scratch = wh.root / layout.scratch_key(run_id)
    if not _resumable(scratch) or _age_s(scratch, now) >= min_age_s:
        sweep.remove_path(scratch)


def _model_leftovers(run_id: str, output_dir: object, now: float, min_age_s: float) -> list[Path]:
    """The run's staging folder and the output it moved aside, beside its model folder, that may go.

    The record is data anyone with write access to the warehouse can plant: its ``output_dir``
    only says where to look, at two exact names (no pattern). What decides is the marker the run
    left inside each (a folder only its user could write): it must name this run, the process
    that made it must be gone, and the folder must be older than ``min_age_s``."""
    if not isinstance(output_dir, str) or "\x00" in output_dir:
        return []
    output = Path(output_dir)
    if not output.is_absolute() or ".." in output.parts or not output.name:
        return []
    found = []
    for path, role in (
        (layout.staging_dir(output, run_id), "staging"),
        (aside_name(output, run_id), "replaced"),
    ):
        mark = leftover_of(path)
        if mark is None or mark.run_id != run_id or mark.role != role:
            continue
        if _owner_alive(mark.owner) or _newest_s(path, now) < min_age_s:
            continue
        found.append(path)
    return found


def _owner_alive(owner: dict[str, object]) -> bool:
    """Whether the process a marker names may still be running: unless it is seen gone on this
    host, assume it is (a record saying otherwise may be planted; its own host's gc removes it)."""
    named = Owner.parse(owner)
    return named is None or named.alive() is not False


def _newest_s(folder: Path, now: float) -> float:
    """The age of the folder's newest entry (a writer still adding files is younger than that)."""
    return min([_age_s(folder, now), *(_age_s(p, now) for p in folder.iterdir())])


def _resumable(scratch: Path) -> bool:
    """Whether a run's scratch holds a finished checkpoint (what `train --resume` continues from)."""
    return any((scratch / layout.CHECKPOINTS).glob(f"*/{layout.CHECKPOINT_COMPLETE}"))


def _sweep_tmp(wh: Warehouse, running: set[str], sweep: _Sweeper, now: float, min_age_s: float) -> None:
    if not wh.tmp_dir.exists():
        return
    for entry in wh.tmp_dir.iterdir():
        if entry.name.startswith("train-") and entry.name.removeprefix("train-") in running:
            continue
        if _age_s(entry, now) >= min_age_s:
            sweep.remove_path(entry)


def _commit_folders(wh: Warehouse) -> dict[CommitFolder, list[StoredFile]]:
    folders: dict[CommitFolder, list[StoredFile]] = defaultdict(list)
    for f in wh.store.walk(""):
        found = layout.commit_folder_of(f.path)
        if found is not None:
            folders[found].append(f)
    return folders


def _sweep_commit_folders(wh: Warehouse, sweep: _Sweeper, now: float, min_age_s: float) -> None:
    folders = _commit_folders(wh)
    old = lambda files: all(now - f.mtime >= min_age_s for f in files)  # noqa: E731
    listed: dict[CommitFolder, set[str] | None] = {}
    for folder in folders:
        try:
            manifest = parse_manifest(wh.store, folder.key, MANIFEST_KINDS[folder.kind])
        except CorruptFileError:
            continue  # damaged, not abandoned: `tracebank verify` names it, gc leaves it
        names = None if manifest is None else {e.path for e in manifest.files}
        listed[folder] = None if names is None else names | {layout.MANIFEST, layout.RESERVED}
    committed = {f.key for f, names in listed.items() if names is not None and f.kind == "collection"}
    for folder, names in listed.items():
        files = folders[folder]
        gone = (
            folder.kind == "silver"
            and f"{layout.COLLECTIONS}/{folder.key.partition('/')[2]}" not in committed
        )
        if (names is None or gone) and old(files):
            sweep.remove_keys(folder.key, files)
        elif names is not None:
            for f in files:
                if f.path.rpartition("/")[2] not in names and old([f]):
                    sweep.remove_keys(f.path, [f])


def _sweep_claims(wh: Warehouse, sweep: _Sweeper, now: float, min_age_s: float) -> None:
    """Claims nobody holds whose every file is older than ``min_age_s`` (what `clear_if_free` clears)."""
    for name in wh.store.children(layout.CLAIMS):
        claim = Claim(wh.store, f"{layout.CLAIMS}/{name}")
        files = wh.store.walk(claim.key)
        if not files or not all(sweep.unlinked(f.path) for f in files):
            continue
        if claim.holder() is not None or any(now - f.mtime < min_age_s for f in files):
            continue
        if sweep.dry_run or claim.clear_if_free(older_than=min_age_s):
            sweep.report.removed.append((f"{wh.store.uri}/{claim.key}", sum(f.size for f in files)))


def gc(wh: Warehouse, min_age_s: float = DEFAULT_MIN_AGE_S, dry_run: bool = False) -> GcReport:
    """Remove what crashed writers left in ``wh`` (see the module docstring); what it freed."""
    wh.check_format()  # refuses a top-level folder that is a symlink, as every command does
    sweep = _Sweeper(wh, dry_run)
    now = time.time()
    running = _settle_runs(wh, sweep, min_age_s)
    _sweep_tmp(wh, running, sweep, now, min_age_s)
    _sweep_commit_folders(wh, sweep, now, min_age_s)
    _sweep_claims(wh, sweep, now, min_age_s)
    for tmp in wh.root.glob(f"*{layout.TMP_MARK}*"):  # FORMAT.json's temp file
        if _age_s(tmp, now) >= min_age_s:
            sweep.remove_path(tmp)
    return sweep.report
