"""The runner's side of the child boundary: where the child's spec lives."""

from __future__ import annotations

import stat
from pathlib import Path

from tracebank.core.events import ChildStarted
from tracebank.train import TrainConfig, train
from tracebank.train.spec import ChildSpec

from tests.train.conftest import FAST


def test_the_child_reads_its_spec_from_a_private_folder_outside_the_warehouse(qa_wh, tiny_model, tmp_path):
    """The warehouse may be shared: a spec there could be swapped before the child reads it."""
    seen: dict[str, object] = {}

    def on_event(event):
        if isinstance(event, ChildStarted):
            argv = Path(f"/proc/{event.pid}/cmdline").read_bytes().split(b"\0")
            path = Path(argv[argv.index(b"tracebank.train.child") + 1].decode())
            seen.update(path=path, mode=stat.S_IMODE(path.parent.stat().st_mode), spec=ChildSpec.read(path))

    options = {**FAST, "max_steps": 1}
    config = TrainConfig(dataset="qa", base_model=str(tiny_model), output=str(tmp_path / "out"), **options)
    record = train(qa_wh, config, on_event=on_event)
    path = seen["path"]
    assert isinstance(path, Path) and qa_wh.root.resolve() not in path.resolve().parents
    assert seen["mode"] == 0o700
    assert not path.parent.exists()  # removed with the run
    assert isinstance(seen["spec"], ChildSpec) and seen["spec"].staging_dir.startswith(str(tmp_path))
    assert record.status == "succeeded"
