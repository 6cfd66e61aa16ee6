"""The output guard: never the warehouse, never what tracebank did not write, never a kind change."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from tracebank.core.errors import UsageError
from tracebank.core.outputs import (
    LEFTOVER_MARKER,
    MARKER,
    Leftover,
    OutputGuard,
    create_staging,
    leftover_of,
    sidecar,
    written_by,
)
from tracebank.warehouse.location import Warehouse


@pytest.fixture
def wh(tmp_path):
    return Warehouse(tmp_path / "home" / "wh").init()


def _guard(wh, path, kind="file", overwrite=False, **kw):
    return OutputGuard(path, kind=kind, warehouse_root=wh.root, command="export", overwrite=overwrite, **kw)


def _write(guard, text="new\n"):
    with guard.writing() as tmp:
        if guard.kind == "folder":
            tmp.mkdir()
            (tmp / "data.txt").write_text(text)
        else:
            tmp.write_text(text)


def _snapshot(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("kind", ["file", "folder"])
@pytest.mark.parametrize("where", ["warehouse", "inside", "above", "link into"])
def test_the_warehouse_inside_it_and_above_it_are_refused_even_forced(wh, tmp_path, kind, where):
    (tmp_path / "link").symlink_to(wh.root / "tmp")
    before = _snapshot(tmp_path)
    path = {
        "warehouse": wh.root,
        "inside": wh.root / "datasets" / "x",
        "above": wh.root.parent,
        "link into": tmp_path / "link" / "out",
    }[where]
    with pytest.raises(UsageError, match="the warehouse"):
        _write(_guard(wh, path, kind, overwrite=True))
    assert _snapshot(tmp_path) == before


def test_a_file_tracebank_did_not_write_is_never_replaced(wh, tmp_path):
    out = tmp_path / "x.jsonl"
    out.write_text("keep me\n")
    for overwrite in (False, True):
        with pytest.raises(UsageError, match="was not written by tracebank export"):
            _write(_guard(wh, out, overwrite=overwrite))
    assert out.read_text() == "keep me\n"
    assert [p.name for p in tmp_path.iterdir() if p.name != "home"] == ["x.jsonl"]  # no temp left


def test_its_own_file_is_replaced_only_with_the_flag_and_only_while_unchanged(wh, tmp_path):
    out = tmp_path / "x.jsonl"
    _write(_guard(wh, out), "one\n")
    assert out.read_text() == "one\n" and written_by(out, "export", "file")
    assert json.loads(sidecar(out).read_text())["command"] == "export"
    with pytest.raises(UsageError, match="exists") as refused:
        _write(_guard(wh, out), "two\n")
    assert "pass --force to overwrite it" in refused.value.one_line()
    _write(_guard(wh, out, overwrite=True), "two\n")
    assert out.read_text() == "two\n"
    # Edited since (or another file put in its place): no longer tracebank's.
    out.write_text("my notes\n")
    with pytest.raises(UsageError, match="was not written by"):
        _write(_guard(wh, out, overwrite=True), "three\n")
    assert out.read_text() == "my notes\n"
    # Another command's output is not this one's.
    report = OutputGuard(tmp_path / "x.jsonl", kind="file", warehouse_root=wh.root, command="report")
    assert not report._is_own(out)


def test_a_folder_never_becomes_a_file_nor_a_file_a_folder(wh, tmp_path):
    folder, file = tmp_path / "d", tmp_path / "f.jsonl"
    _write(_guard(wh, folder, "folder"))
    _write(_guard(wh, file, "file"))
    with pytest.raises(UsageError, match="is a folder; tracebank export writes a file"):
        _write(_guard(wh, folder, "file", overwrite=True))
    with pytest.raises(UsageError, match="is a file; tracebank export writes a folder"):
        _write(_guard(wh, file, "folder", overwrite=True))
    assert folder.is_dir() and (folder / "data.txt").read_text() == "new\n" and file.read_text() == "new\n"


def test_its_own_folder_is_replaced_whole_and_an_empty_one_needs_no_flag(wh, tmp_path):
    out = tmp_path / "hf"
    out.mkdir()
    _write(_guard(wh, out, "folder"), "one")  # empty: nothing to lose
    assert (out / MARKER).exists() and written_by(out, "export", "folder")
    (out / "extra").write_text("left by the old export")
    _write(_guard(wh, out, "folder", overwrite=True), "two")
    assert sorted(p.name for p in out.iterdir()) == sorted([MARKER, "data.txt"])
    assert (out / "data.txt").read_text() == "two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "home"]  # old and temp folders gone


def test_a_failed_write_leaves_the_old_output_and_no_temp(wh, tmp_path):
    out = tmp_path / "x.jsonl"
    _write(_guard(wh, out), "old\n")
    with pytest.raises(RuntimeError), _guard(wh, out, overwrite=True).writing() as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed")
    assert out.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["x.jsonl", sidecar(out).name, "home"])


def test_an_output_that_appears_while_writing_is_checked_again(wh, tmp_path):
    out = tmp_path / "x.jsonl"
    with pytest.raises(UsageError, match="was not written by"), _guard(wh, out).writing() as tmp:
        tmp.write_text("new\n")
        out.write_text("someone else's\n")
    assert out.read_text() == "someone else's\n"


def test_a_command_with_its_own_mark_decides_what_it_owns(wh, tmp_path):
    """train's shape: a folder whose tracebank.json names a run is its own; it writes that mark itself."""

    def written_by_train(folder):
        return (folder / "tracebank.json").exists()

    out = tmp_path / "model"
    out.mkdir()
    (out / "weights.bin").write_text("someone's model")
    guard = OutputGuard(
        out,
        kind="folder",
        warehouse_root=wh.root,
        command="train",
        overwrite=True,
        overwrite_flag="--overwrite",
        owned=written_by_train,
    )
    with pytest.raises(UsageError, match="was not written by tracebank train") as refused:
        guard.check()
    assert "--overwrite replaces only what tracebank train wrote" in refused.value.one_line()
    (out / "tracebank.json").write_text('{"run_id": "r1"}')
    staged = guard.temp()
    staged.mkdir()
    (staged / "tracebank.json").write_text('{"run_id": "r2"}')
    guard.publish(staged)
    assert json.loads((out / "tracebank.json").read_text()) == {"run_id": "r2"}
    assert not (out / MARKER).exists() and not (out / "weights.bin").exists()


def test_a_symlinked_output_is_judged_by_where_it_points(wh, tmp_path):
    target = tmp_path / "real.jsonl"
    target.write_text("user data\n")
    link = tmp_path / "link.jsonl"
    os.symlink(target, link)
    with pytest.raises(UsageError, match="real.jsonl exists and was not written"):
        _write(_guard(wh, link, overwrite=True))
    assert target.read_text() == "user data\n"


def test_a_runs_staging_is_marked_and_its_published_model_is_not(wh, tmp_path, monkeypatch):
    """train's staging folder and the model it replaces carry a marker naming the run (what lets gc
    remove them if the run dies); the published model carries none."""
    out = tmp_path / "model"
    out.mkdir()
    (out / "tracebank.json").write_text('{"run_id": "r1"}')
    guard = OutputGuard(
        out, kind="folder", warehouse_root=wh.root, command="train", overwrite=True,
        owned=lambda folder: (folder / "tracebank.json").exists(),
    )  # fmt: skip
    owner = {"pid": 1, "host": "h", "start": None, "what": "train run r2"}
    staged = create_staging(tmp_path / ".model.tmp-r2", "r2", owner)
    assert leftover_of(staged) == Leftover("r2", "staging", owner)
    (staged / "tracebank.json").write_text('{"run_id": "r2"}')
    asides = []
    real_rmtree = shutil.rmtree
    monkeypatch.setattr(shutil, "rmtree", lambda path, **kw: asides.append((path, leftover_of(path))))
    guard.publish(staged, "r2", owner)  # the run "dies" before the old model is removed
    monkeypatch.setattr(shutil, "rmtree", real_rmtree)
    assert sorted(p.name for p in out.iterdir()) == ["tracebank.json"]
    assert asides == [(tmp_path / ".model.old-r2", Leftover("r2", "replaced", owner))]
    assert json.loads((tmp_path / ".model.old-r2" / "tracebank.json").read_text()) == {"run_id": "r1"}


def test_a_link_or_a_forged_marker_is_no_leftover(tmp_path):
    real = create_staging(tmp_path / "real", "r1", {"pid": 1, "host": "h"})
    (tmp_path / "link").symlink_to(real, target_is_directory=True)
    assert leftover_of(tmp_path / "link") is None
    (tmp_path / "linked-marker").mkdir()
    (tmp_path / "linked-marker" / LEFTOVER_MARKER).symlink_to(real / LEFTOVER_MARKER)
    assert leftover_of(tmp_path / "linked-marker") is None
    (real / LEFTOVER_MARKER).write_text('{"run_id": "r1", "leftover": "staging"}')
    assert leftover_of(real) is None
