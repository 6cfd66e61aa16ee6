"""The parent's side of the child boundary: typed events from a real process through a real FIFO."""

from __future__ import annotations

import json
import sys
import textwrap

from tracebank.core.events import ChildDone, Metric, MetricLogged, ModelLoaded
from tracebank.train.record import RunRecord, RunWriter, now
from tracebank.train.supervisor import ChildRun
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.storage import Storage

LOADED = ModelLoaded(
    backend="trl",
    resolved={"backend": "trl", "device": "cpu"},
    trainable_params=10,
    total_params=100,
    trainable_percent=10.0,
    pad_token_id=7,
)
METRIC = MetricLogged(Metric(step=1, split="train", loss=2.5))
DONE = ChildDone(stats={"steps": 1}, saved={"save": "lora"})

#: Lines a child (or whatever else writes into its FIFO) might send besides its events.
NOISE = [b"not json", b"[1, 2]", b'"loaded"', b'{"event": "loaded", "backend": "trl"}', b'{"event": "nope"}']


def _child(tmp_path, lines: list[bytes]) -> list[str]:
    """A process that writes ``lines`` into the FIFO named by its first argument, as the child does."""
    script = tmp_path / "fake_child.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys
            with open(sys.argv[1], "wb") as fifo:
                for line in {lines!r}:
                    fifo.write(line + b"\\n")
            """
        )
    )
    return [sys.executable, str(script), str(tmp_path / "events")]


def _writer(tmp_path) -> RunWriter:
    wh = Warehouse(tmp_path / "wh").init()
    record = RunRecord(
        run_id="r1",
        status="running",
        dataset="qa@v1",
        content_hash="h",
        base_model="m",
        backend="auto",
        output_dir=str(tmp_path / "out"),
        save="lora",
        hyperparameters={},
        libraries={},
        started_at=now(),
    )
    return RunWriter(wh, record)


def test_lines_that_are_no_known_event_are_skipped_and_events_are_handled_by_type(tmp_path):
    writer = _writer(tmp_path)
    seen = []
    child = ChildRun("r1", writer, timeout=60, on_event=seen.append)
    lines = [*NOISE, *(json.dumps(e.to_dict()).encode() for e in (LOADED, METRIC, DONE))]
    child.run(_child(tmp_path, lines), tmp_path / "events", tmp_path / "train.log")
    assert child.failure() is None
    assert child.result == DONE
    assert child.metrics == [METRIC.metric.to_dict()]
    assert seen == [LOADED, METRIC]  # the run's result is the supervisor's, not progress


def test_the_padding_id_the_child_loaded_with_reaches_the_run_record(tmp_path):
    writer = _writer(tmp_path)
    child = ChildRun("r1", writer, timeout=60, on_event=lambda e: None)
    child.run(
        _child(tmp_path, [json.dumps(LOADED.to_dict()).encode()]), tmp_path / "events", tmp_path / "log"
    )
    stored = Storage(writer.storage.wh).runs()[0][1]
    assert stored.model["pad_token_id"] == 7
    assert stored.model["trainable_params"] == 10 and stored.resolved == LOADED.resolved
