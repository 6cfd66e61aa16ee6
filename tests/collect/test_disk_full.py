"""A full disk is one line, and collect's exit code matches what it committed (issue 12, point 5)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from click.testing import CliRunner
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.storage import Storage

from tests.collect.helpers import fill_url
from tracebank.cli.main import cli


@pytest.fixture(scope="module")
def filled_store(store_url):
    fill_url(store_url, 60, seed=9)
    return store_url


def _mount(path, size):
    """A real tmpfs of ``size`` bytes at ``path``: writes past it fail with ENOSPC, as on a full disk."""
    path.mkdir(exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    if shutil.which("mount") is None or done.returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")


def _used(path) -> int:
    return shutil.disk_usage(path).used


@pytest.fixture
def disks(tmp_path):
    mounted: list = []

    def mount(name, size):
        _mount(tmp_path / name, size)
        mounted.append(tmp_path / name)
        return tmp_path / name

    yield mount
    for path in mounted:
        subprocess.run(["umount", str(path)], check=False)


def test_disk_full_during_collect_is_one_line_and_commits_nothing(filled_store, disks):
    wh = Warehouse(disks("tiny", 24 * 1024) / "warehouse").init()
    out = CliRunner().invoke(cli, ["--warehouse", str(wh.root), "collect", "--store", filled_store])
    assert out.exit_code == 1
    (line,) = out.stderr.splitlines()
    assert line.startswith("Error: no space left on the device")
    assert line.endswith(
        "(free some space and rerun; nothing partial was committed, `tracebank gc` removes the temp files)"
    )
    assert Storage(wh).collections() == []


def test_disk_full_after_the_collection_committed_exits_0_and_says_silver_was_not_built(filled_store, disks):
    # Measure what the bronze alone takes, then give a disk with room for it and a little more.
    roomy = Warehouse(disks("roomy", 64 * 1024 * 1024) / "warehouse").init()
    before = _used(roomy.root)
    CliRunner().invoke(
        cli, ["--warehouse", str(roomy.root), "collect", "--store", filled_store, "--no-silver"]
    )
    bronze = _used(roomy.root) - before
    disk = disks("just-bronze", before + bronze + 3 * 4096)
    wh = Warehouse(disk / "warehouse").init()
    out = CliRunner().invoke(cli, ["--warehouse", str(wh.root), "collect", "--store", filled_store])
    assert out.exit_code == 0, out.output
    (cid,) = [folder.name for folder, _ in Storage(wh).collections()]
    assert out.stderr == (
        f"Warning: collection {cid} is committed, but its silver tables were not built "
        "(no space left on the device); `tracebank transform` builds them\n"
    )
