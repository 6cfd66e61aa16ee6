"""`tracebank gc` removes only what crashed writers left, and says what it freed."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner
from tracebank.core.outputs import LEFTOVER_MARKER, create_staging, move_aside
from tracebank.warehouse import layout
from tracebank.warehouse.backends import open_warehouse
from tracebank.warehouse.claims import Owner
from tracebank.warehouse.gc import gc
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.records import CollectionManifest, RunRecord
from tracebank.warehouse.schemas import SPANS, conform
from tracebank.warehouse.storage import Storage

from tracebank.cli.main import cli

HOUR_AGO = time.time() - 7200


def _old(path, when=HOUR_AGO):
    for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.utime(p, (when, when))
    return path


def _committed(wh):
    folder = wh.collection_dir("c1")
    table = conform(pa.table({"collection_id": ["c1"], "name": ["a"]}), SPANS)
    storage = Storage(wh)
    entry = storage.write_table(folder, "spans-0000.parquet", table, "spans")
    storage.commit_collection(folder, CollectionManifest(collection_id="c1", files=[entry]))
    return folder


def _snapshot(folder):
    return sorted((str(p.relative_to(folder)), p.read_bytes()) for p in folder.rglob("*") if p.is_file())


def test_gc_removes_old_leftovers_and_keeps_committed_data_and_young_files(wh):
    committed = _old(_committed(wh))
    kept = _snapshot(committed)
    stale_tmp = committed / "spans-0001.parquet.tmp-0123456789ab"
    stale_tmp.write_bytes(b"x" * 1000)
    _old(stale_tmp)
    young_tmp = committed / "spans-0002.parquet.tmp-ba9876543210"
    young_tmp.write_bytes(b"y" * 10)
    abandoned = wh.collection_dir("c2")
    abandoned.mkdir()
    (abandoned / "spans-0000.parquet").write_bytes(b"z" * 500)
    _old(abandoned)
    scratch = wh.tmp_dir / "train-20260101-000000-qa-abcd"
    scratch.mkdir()
    (scratch / "rows.arrow").write_bytes(b"s" * 2000)
    _old(scratch)

    report = gc(wh, dry_run=True)
    removed = sorted(Path(p).name for p, _ in report.removed)
    assert removed == sorted([stale_tmp.name, abandoned.name, scratch.name])
    assert stale_tmp.exists() and abandoned.exists() and scratch.exists()

    out = CliRunner().invoke(cli, ["--warehouse", str(wh.root), "gc"])
    assert out.exit_code == 0
    lines = out.stdout.splitlines()
    assert lines[-1] == "gc: freed 3.4 KB in 3 item(s)"
    assert sorted(lines[:-1]) == sorted(
        [
            f"removed {stale_tmp} (1,000 bytes)",
            f"removed {abandoned} (500 bytes)",
            f"removed {scratch} (2,000 bytes)",
        ]
    )
    assert not stale_tmp.exists() and not abandoned.exists() and not scratch.exists()
    assert young_tmp.exists()
    assert _snapshot(committed) == kept + [(young_tmp.name, b"y" * 10)]


def test_gc_on_a_clean_warehouse_frees_nothing(wh):
    _committed(wh)
    out = CliRunner().invoke(cli, ["--warehouse", str(wh.root), "gc"])
    assert out.stdout == "gc: freed 0 B in 0 item(s)\n"


def test_min_age_zero_removes_young_leftovers_too(wh):
    tmp = wh.tmp_dir / "scratch"
    tmp.mkdir()
    report = gc(wh, min_age_s=0)
    assert [p for p, _ in report.removed] == [str(tmp)] and not tmp.exists()


# -- issue 27: gc deletes only inside the warehouse, and only what tracebank wrote there ----------

PLANTED = "20260101-000000-planted-c"


def _fake_home(tmp_path: Path) -> Path:
    """A reader's home with files whose names look like tracebank's leftovers."""
    home = tmp_path / "home"
    (home / ".ssh.old-keys").mkdir(parents=True)
    (home / ".ssh.old-keys" / "id_ed25519").write_text("secret key")
    (home / ".bashrc.old-2023").write_text("alias ll='ls -l'")
    (home / f".x.tmp-{PLANTED}").mkdir()
    (home / f".x.tmp-{PLANTED}" / "notes.txt").write_text("mine")
    (home / "docs").mkdir()
    (home / "docs" / "0000000001").write_text("looks like a claim generation")
    (home / "docs" / "plan.txt").write_text("a plan")
    return _old(home)


def _everything(home: Path) -> list[tuple[str, bytes | None]]:
    return sorted(
        (str(p.relative_to(home)), p.read_bytes() if p.is_file() else None) for p in home.rglob("*")
    )


@pytest.fixture(params=["folder", "s3"])
def location(request, tmp_path, monkeypatch) -> str:
    """A warehouse in a folder, or in a bucket (a real moto server) through this machine's mirror."""
    monkeypatch.setenv("TRACEBANK_CACHE_DIR", str(tmp_path / "cache"))
    where = str(tmp_path / "warehouse")
    if request.param == "s3":
        where = f"s3://{request.getfixturevalue('s3_bucket')}/wh"
    open_warehouse(where).init()
    return where


def _plant_run(wh: Warehouse, run_id: str, output_dir: str, status: str = "failed", owner=None) -> None:
    """A run record as a co-worker with write access to the warehouse could write it."""
    record = RunRecord(
        run_id=run_id,
        status=status,
        dataset="qa@v1",
        content_hash=None,
        base_model="base",
        backend="trl",
        output_dir=output_dir,
        save="lora",
        hyperparameters={},
        libraries={},
        started_at="2026-01-01T00:00:00+00:00",
        owner=owner,
    )
    Storage(wh).write_run(record)


def _gc(location: str, *args: str):
    return CliRunner().invoke(cli, ["--warehouse", location, "gc", *args])


def test_planted_run_records_never_name_what_gc_deletes(location, tmp_path):
    home = _fake_home(tmp_path)
    before = _everything(home)
    wh = open_warehouse(location)
    dotted = f"{wh.root}/{os.path.relpath(home, wh.root)}"  # .../warehouse/../home
    assert ".." in dotted
    _plant_run(wh, "20260101-000000-planted-a", f"{home}/*")
    _plant_run(wh, "20260101-000000-planted-b", f"{dotted}/ssh")
    _plant_run(wh, PLANTED, f"{home}/x")
    _plant_run(wh, "20260101-000000-planted-d", f"{dotted}/[.]bashrc")
    _plant_run(wh, "20260101-000000-planted-e", "home/x")  # relative: to wherever gc runs
    _plant_run(wh, "20260101-000000-planted-f", f"{home}/x\x00")
    for args in (["--dry-run"], [], ["--min-age", "0"]):
        out = _gc(location, *args)
        assert out.exit_code == 0, out.output
        assert str(home) not in out.stdout
        assert _everything(home) == before


@pytest.mark.parametrize("folder", ["tmp", "claims", "runs", "collections", "datasets"])
def test_a_top_level_folder_that_is_a_symlink_is_refused_in_one_line(location, tmp_path, folder):
    home = _fake_home(tmp_path)
    before = _everything(home)
    wh = open_warehouse(location)
    link = wh.root / folder
    shutil.rmtree(link, ignore_errors=True)
    link.symlink_to(home, target_is_directory=True)
    for args in (["--dry-run"], ["--min-age", "0"]):
        out = _gc(location, *args)
        assert out.exit_code == 1, out.output
        assert out.stdout == ""
        assert out.stderr == (
            f"Error: {link} is a symbolic link (to {home}); tracebank never follows one out of the warehouse "
            f"(replace the link with the folder it points to, or remove it)\n"
        )
        assert _everything(home) == before


@pytest.mark.parametrize(
    "args",
    [["sql", "SELECT 1"], ["datasets", "list"], ["runs", "list"], ["verify"], ["transform", "--name", "d"]],
    ids=lambda a: a[0],
)
def test_every_command_refuses_a_top_level_folder_that_is_a_symlink(wh, tmp_path, args):
    """The guard is written once (`Warehouse.check_format`), so no command reads or writes through
    a top-level folder a co-worker pointed out of a shared warehouse."""
    home = _fake_home(tmp_path)
    before = _everything(home)
    link = wh.root / "datasets"
    shutil.rmtree(link, ignore_errors=True)
    link.symlink_to(home, target_is_directory=True)
    out = CliRunner().invoke(cli, ["-w", str(wh.root), *args])
    assert out.exit_code == 1, out.output
    assert out.stderr.startswith(f"Error: {link} is a symbolic link") and out.stderr.count("\n") == 1
    assert _everything(home) == before


def test_a_claim_or_commit_folder_that_is_a_symlink_is_never_swept(wh, tmp_path):
    home = _fake_home(tmp_path)
    before = _everything(home)
    (wh.root / "claims").mkdir()
    (wh.root / "claims" / "collect").symlink_to(home / "docs", target_is_directory=True)
    (wh.collections_dir / "c9").symlink_to(home, target_is_directory=True)
    (wh.datasets_dir / "qa").symlink_to(home, target_is_directory=True)
    for dry_run in (True, False):
        assert gc(wh, min_age_s=0, dry_run=dry_run).removed == []
        assert _everything(home) == before


def test_a_symlink_below_the_top_is_removed_itself_never_followed(wh, tmp_path):
    home = _fake_home(tmp_path)
    before = _everything(home)
    (wh.tmp_dir / "scratch-link").symlink_to(home, target_is_directory=True)
    (wh.tmp_dir / "nested").mkdir()
    (wh.tmp_dir / "nested" / "into-home").symlink_to(home, target_is_directory=True)
    _old(wh.tmp_dir)
    os.utime(wh.tmp_dir / "scratch-link", (HOUR_AGO, HOUR_AGO), follow_symlinks=False)
    report = gc(wh, min_age_s=0)
    assert sorted(Path(p).name for p, _ in report.removed) == ["nested", "scratch-link"]
    assert _everything(home) == before
    assert list(wh.tmp_dir.iterdir()) == []


def _dead_owner() -> dict[str, object]:
    """The owner of a process that has ended (a real one: its pid is not reused this soon)."""
    proc = subprocess.Popen([sys.executable, "-c", "import os; print(os.getpid())"], stdout=subprocess.PIPE)
    pid = int(proc.communicate()[0])
    return {"pid": pid, "host": socket.gethostname(), "start": "1", "what": "train run"}


def _leftovers_of_a_killed_run(models: Path, run_id: str, owner: dict) -> tuple[Path, Path]:
    """What a train run killed while publishing leaves beside its model: its staging folder (made
    as train makes it) and the model it was replacing, moved aside (as the output guard does)."""
    output = models / "model"
    output.mkdir(parents=True)
    (output / "tracebank.json").write_text(json.dumps({"run_id": "20251231-000000-older"}))
    staging = create_staging(layout.staging_dir(output, run_id), run_id, owner)
    (staging / "adapter_model.safetensors").write_bytes(b"w" * 100)
    aside = move_aside(output, run_id, owner)
    return staging, aside


def test_a_killed_runs_staging_and_replaced_output_go_once_ended_and_old(location, tmp_path):
    wh = open_warehouse(location)
    run_id = "20260102-000000-killed"
    owner = _dead_owner()
    staging, aside = _leftovers_of_a_killed_run(tmp_path / "models", run_id, owner)
    assert aside.name == f".model.old-{run_id}"
    _plant_run(wh, run_id, str(tmp_path / "models" / "model"), status="running", owner=owner)
    young = _gc(location)  # a writer younger than --min-age may still want them
    assert young.exit_code == 0 and staging.is_dir() and aside.is_dir(), young.output
    _old(staging), _old(aside)
    dry = _gc(location, "--dry-run")
    real = _gc(location)
    assert dry.exit_code == real.exit_code == 0, dry.output + real.output
    assert f"would remove {staging} (" in dry.stdout and f"would remove {aside} (" in dry.stdout
    assert dry.stdout.replace("would remove", "removed").replace("would free", "freed") == real.stdout
    assert not staging.exists() and not aside.exists()
    assert [p.name for p in (tmp_path / "models").iterdir()] == []


def test_leftovers_of_a_live_run_or_marked_for_another_run_stay(wh, tmp_path):
    models = tmp_path / "models"
    alive = Owner.current("train run").to_dict()
    staging, aside = _leftovers_of_a_killed_run(models, "20260102-000000-live", alive)
    _old(staging), _old(aside)
    # The record says failed (a planter can say so); the marker's owner is this live process.
    _plant_run(wh, "20260102-000000-live", str(models / "model"), status="failed")
    other = models / ".model.tmp-20260102-000000-other"
    other.mkdir()
    (other / LEFTOVER_MARKER).write_text((staging / LEFTOVER_MARKER).read_text())  # names -live
    _old(other)
    _plant_run(wh, "20260102-000000-other", str(models / "model"), owner=_dead_owner())
    elsewhere = models / "elsewhere"  # made by a process of another host: its end cannot be seen here
    far = create_staging(layout.staging_dir(elsewhere, "20260102-000000-far"), "20260102-000000-far",
                         {**_dead_owner(), "host": "another-host"})  # fmt: skip
    _old(far)
    _plant_run(wh, "20260102-000000-far", str(elsewhere), status="failed")
    assert gc(wh, min_age_s=0).removed == []
    assert staging.is_dir() and aside.is_dir() and other.is_dir() and far.is_dir()


def test_dry_run_lists_exactly_what_gc_then_removes(wh, tmp_path):
    """Every kind of leftover at once, claims included (a dry run used to leave them out)."""
    _committed(wh)
    (wh.tmp_dir / "scratch").mkdir()
    (wh.tmp_dir / "scratch" / "rows.arrow").write_bytes(b"s" * 20)
    (wh.tmp_dir / "link").symlink_to(tmp_path, target_is_directory=True)
    abandoned = wh.collection_dir("c2")
    abandoned.mkdir()
    (abandoned / "spans-0000.parquet").write_bytes(b"z" * 5)
    claim = wh.root / "claims" / "collect"
    claim.mkdir(parents=True)
    (claim / "0000000001").write_text(json.dumps(_dead_owner()))
    (wh.root / "FORMAT.json.tmp-0123").write_text("{}")
    _old(wh.root)
    os.utime(wh.tmp_dir / "link", (HOUR_AGO, HOUR_AGO), follow_symlinks=False)
    dry = gc(wh, dry_run=True)
    real = gc(wh)
    assert dry.removed == real.removed
    assert f"{wh.store.uri}/claims/collect" in [p for p, _ in real.removed]
    assert len(real.removed) == 5 and not claim.exists()
