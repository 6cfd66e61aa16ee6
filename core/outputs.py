"""The one guard for every command that writes a file or folder outside the warehouse.

`export -o`, `report -o` and `train --output` name a path the user chose; a typo there
must never cost data. So an output:

- is never the warehouse, a path inside it, or a folder that holds it (symlinks resolved
  on both sides first, so a link into the warehouse is caught too);
- replaces something that exists only with the command's overwrite flag (``--force``,
  ``--overwrite``) and only when tracebank wrote it: a marker it left says so (a folder
  holds :data:`MARKER`; a file has a sidecar ``.<name>.tracebank-output.json`` beside it
  recording the size, time and inode it was written with, so a file edited or put there
  since is not taken for tracebank's). An empty folder holds nothing to lose and may be
  replaced by a folder output without the flag;
- never turns a folder into a file or a file into a folder;
- is written under a temporary name beside the final one (same file system), then renamed
  into place; an old output is moved aside before and removed only once the new one is
  there, so a crash leaves the old or the new output, never a mix.

A command whose outputs carry their own mark (train's ``tracebank.json`` names a run)
passes ``owned=`` and writes that mark itself; otherwise the guard writes :data:`MARKER`.

A run can die between those steps and leave, beside its model folder, its staging folder
(``.<name>.tmp-<run_id>``, :func:`create_staging`) or the model it was replacing
(``.<name>.old-<run_id>``, :func:`move_aside`). Each carries :data:`LEFTOVER_MARKER` naming the
run and the process that made it: that mark, in a folder only this user could write, is what
lets `tracebank gc` remove it; a run record (data anyone with write access to the warehouse
can plant) only says where to look.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from tracebank.core.errors import UsageError

#: The marker a tracebank output carries: inside a folder, or as ``.<name>`` + it beside a file.
MARKER = ".tracebank-output.json"
Kind = Literal["file", "folder"]
#: Inside a leftover folder beside an output (a run's staging, an output it moved aside): whose it is.
LEFTOVER_MARKER = ".tracebank-leftover.json"
Role = Literal["staging", "replaced"]


def sidecar(path: Path) -> Path:
    """Where a file output's marker lives: beside it, hidden."""
    return path.with_name(f".{path.name}{MARKER}")


def marker_of(path: Path, kind: Kind) -> Path:
    return path / MARKER if kind == "folder" else sidecar(path)


def _read_marker(path: Path) -> dict[str, object] | None:
    if path.is_symlink() or not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return doc if isinstance(doc, dict) else None


def _file_stamp(path: Path) -> dict[str, int]:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino}


def written_by(path: Path, command: str, kind: Kind) -> bool:
    """Whether ``path`` is an output ``tracebank <command>`` wrote and nobody changed since (for a
    file: the same size, time and inode its marker recorded)."""
    doc = _read_marker(marker_of(path, kind))
    if doc is None or doc.get("command") != command or doc.get("kind") != kind:
        return False
    return kind == "folder" or doc.get("stamp") == _file_stamp(path)


def _is_empty_folder(path: Path) -> bool:
    return path.is_dir() and not any(path.iterdir())


def _kind_of(path: Path) -> Kind:
    return "folder" if path.is_dir() else "file"


def _write_json(path: Path, doc: dict[str, object]) -> None:
    tmp = path.with_name(f"{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    tmp.write_text(json.dumps(doc, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


@dataclass(frozen=True)
class Leftover:
    """What a leftover folder's marker says."""

    run_id: str
    """The run that made it."""
    role: Role
    """``staging``: the run's half-written model; ``replaced``: the output it was replacing."""
    owner: dict[str, object]
    """The process that made it (``Owner.to_dict()`` of :mod:`tracebank.warehouse.claims`)."""


def _mark_leftover(folder: Path, run_id: str, role: Role, owner: Mapping[str, object]) -> None:
    doc: dict[str, object] = {
        "written_by": "tracebank",
        "leftover": role,
        "run_id": run_id,
        "owner": dict(owner),
    }
    _write_json(folder / LEFTOVER_MARKER, doc)


def leftover_of(folder: Path) -> Leftover | None:
    """The marker of the leftover folder ``folder``; None unless it is a real folder (not a link)
    holding a well-formed marker (a real file)."""
    if folder.is_symlink() or not folder.is_dir():
        return None
    doc = _read_marker(folder / LEFTOVER_MARKER)
    if (
        doc is None
        or doc.get("written_by") != "tracebank"
        or doc.get("leftover") not in ("staging", "replaced")
    ):
        return None
    run_id, owner = doc.get("run_id"), doc.get("owner")
    if not isinstance(run_id, str) or not run_id or not isinstance(owner, dict):
        return None
    role: Role = "staging" if doc["leftover"] == "staging" else "replaced"
    return Leftover(run_id, role, owner)


def create_staging(path: Path, run_id: str, owner: Mapping[str, object]) -> Path:
    """Create a run's staging folder, marked as the run's before anything is written into it
    (:meth:`OutputGuard.publish` drops the mark, so it never reaches the published model)."""
    path.mkdir(parents=True)
    _mark_leftover(path, run_id, "staging", owner)
    return path


def aside_name(path: Path, run_id: str | None) -> Path:
    """Where an output replaced by run ``run_id`` (or by a command without a run) is moved aside."""
    return path.with_name(f".{path.name}.old-{run_id or uuid.uuid4().hex[:12]}")


def move_aside(path: Path, run_id: str | None, owner: Mapping[str, object] | None) -> Path:
    """Move the output ``path`` aside before it is replaced; a folder moved aside by a run is
    marked with the run (so gc can remove it if the run dies before it does)."""
    old = aside_name(path, run_id)
    if old.exists() or old.is_symlink():  # an earlier attempt of the run left one: keep it, unmarked
        old = aside_name(path, None)
        run_id = None
    os.replace(path, old)
    if run_id is not None and owner is not None and old.is_dir() and not old.is_symlink():
        _mark_leftover(old, run_id, "replaced", owner)
    return old


@dataclass(frozen=True)
class OutputGuard:
    """Checks and publishes one output of ``tracebank <command>``; see the module docstring."""

    path: Path
    """The output as the user named it (resolved, symlinks followed, on creation)."""
    kind: Kind
    """Whether the command writes a ``file`` or a ``folder``."""
    warehouse_root: Path
    """The warehouse folder (for a remote warehouse, its mirror): never written, never above."""
    command: str
    """The command writing it (``export``, ``report``, ``train``): its marker names it."""
    overwrite: bool = False
    """Whether the user passed the overwrite flag."""
    option: str = "--output"
    """The option that named the path, for messages."""
    overwrite_flag: str | None = "--force"
    """The command's overwrite flag, for messages; None for a command that always replaces its
    own earlier output (``report``: a page it can write again) and so has no flag."""
    owned: Callable[[Path], bool] | None = field(default=None, compare=False)
    """Whether an existing output is the command's own; default: the marker this guard writes
    (a command that passes its own test marks its outputs itself)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path).expanduser().resolve())
        object.__setattr__(self, "warehouse_root", Path(self.warehouse_root).expanduser().resolve())

    def check(self) -> Path:
        """Raise UsageError unless the output may be written; the resolved path."""
        self._check_warehouse()
        self._check_existing()
        parent = self.path.parent
        if parent.exists() and not parent.is_dir():
            raise UsageError(f"{self.option} {self.path}: {parent} is a file, not a folder")
        return self.path

    def temp(self) -> Path:
        """A fresh temporary name beside the output (same folder, hidden); its parent is created."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return self.path.with_name(f".{self.path.name}.tmp-{uuid.uuid4().hex[:12]}")

    def publish(
        self, staged: Path, run_id: str | None = None, owner: Mapping[str, object] | None = None
    ) -> None:
        """Move ``staged`` (written at :meth:`temp`, or a run's :func:`create_staging`) into place,
        marked; an existing output (checked again: it may have appeared meanwhile) is moved aside
        first (named and marked by ``run_id`` and its ``owner`` process) and removed only after."""
        if _kind_of(staged) != self.kind:
            raise ValueError(f"{staged} is not a {self.kind}")
        self.check()
        if self.kind == "folder":
            (staged / LEFTOVER_MARKER).unlink(missing_ok=True)  # the model is no leftover
            if self.owned is None:
                _write_json(staged / MARKER, self._marker_doc())
        old = None
        if self.path.exists() or self.path.is_symlink():
            old = move_aside(self.path, run_id, owner)
        os.replace(staged, self.path)
        if self.kind == "file" and self.owned is None:
            _write_json(sidecar(self.path), {**self._marker_doc(), "stamp": _file_stamp(self.path)})
        if old is not None:
            shutil.rmtree(old) if old.is_dir() and not old.is_symlink() else old.unlink()

    @contextmanager
    def writing(self) -> Iterator[Path]:
        """Check, yield a temporary path to write the output at, then publish it; on any error
        the temporary file or folder is removed and the old output stays."""
        self.check()
        tmp = self.temp()
        try:
            yield tmp
            self.publish(tmp)
        finally:
            if tmp.is_dir() and not tmp.is_symlink():
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                tmp.unlink(missing_ok=True)

    # checks ---------------------------------------------------------------------------

    def _check_warehouse(self) -> None:
        out, root = self.path, self.warehouse_root
        if out == root or root in out.parents or out in root.parents:
            where = "is" if out == root else ("is inside" if root in out.parents else "holds")
            raise UsageError(
                f"{self.option} {out} {where} the warehouse {root}", "choose a path outside the warehouse"
            )

    def _check_existing(self) -> None:
        out = self.path
        if not out.exists():
            return
        if _kind_of(out) != self.kind:
            what = f"tracebank {self.command} writes a {self.kind} here"
            raise UsageError(
                f"{self.option} {out} is a {_kind_of(out)}; {what}",
                f"choose a {self.kind} path",
            )
        if self.kind == "folder" and _is_empty_folder(out):
            return
        if not self._is_own(out):
            replaces = f"{self.overwrite_flag} replaces" if self.overwrite_flag else "it replaces"
            raise UsageError(
                f"{out} exists and was not written by tracebank {self.command}",
                f"choose another path, or move it away yourself; {replaces} only what "
                f"tracebank {self.command} wrote",
            )
        if not self.overwrite:
            raise UsageError(
                f"{out} exists", f"pass {self.overwrite_flag} to overwrite it, or choose another path"
            )

    def _is_own(self, path: Path) -> bool:
        if self.owned is not None:
            return self.owned(path)
        return written_by(path, self.command, self.kind)

    def _marker_doc(self) -> dict[str, object]:
        return {"written_by": "tracebank", "command": self.command, "kind": self.kind}
