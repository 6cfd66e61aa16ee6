"""The training child seen from the parent: start it (one process, or one per rank through
``train.launch``), pump its events into the run record, stop it.

The child reports typed events of `core.events` as JSON lines (ModelLoaded, MetricLogged,
CheckpointSaved, ChildDone, ChildFailed, ...); this is the one place that turns them into run-record
updates, metrics.jsonl lines and progress events, dispatching on their type. A line that is no
known event is skipped. A timeout kills the child's whole process group.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tracebank.core.events import (
    CheckpointSaved,
    ChildDone,
    ChildFailed,
    Event,
    MetricLogged,
    ModelLoaded,
    OnEvent,
    event_from_dict,
)
from tracebank.train.config import TrainConfig
from tracebank.train.errors import TrainConfigError, TrainError
from tracebank.train.record import RunWriter

KILL_GRACE_S = 5.0

#: The c10d rendezvous id every node of a multi-node run joins under.
RDZV_ID = "tracebank-train"
#: Set to ``torchrun`` to start even a one-process run through the multi-rank launcher, with a
#: process group (the GPU check does).
LAUNCHER_VARIABLE = "TRACEBANK_TRAIN_LAUNCHER"


def child_command(config: TrainConfig, spec_path: Path) -> list[str]:
    """The command that trains ``spec_path``: the child itself, or ``train.launch`` starting one per
    rank (on one node by itself, over nodes under torchrun's c10d rendezvous)."""
    child = ["-m", "tracebank.train.child", str(spec_path)]
    # FSDP needs a process group even on one GPU.
    if config.world_size == 1 and not config.fsdp and os.environ.get(LAUNCHER_VARIABLE) != "torchrun":
        return [sys.executable, "-P", *child]
    launch = [sys.executable, "-P", "-m", "tracebank.train.launch"]
    if config.nnodes == 1:
        return [*launch, "ranks", str(config.nproc_per_node), str(spec_path)]
    rendezvous = [
        f"--nproc-per-node={config.nproc_per_node}",
        "--max-restarts=0",
        "--monitor-interval=0.5",
        f"--nnodes={config.nnodes}",
        f"--node-rank={config.node_rank}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={config.rdzv_endpoint}",
        f"--rdzv-id={RDZV_ID}",
    ]
    return [*launch, "torchrun", *rendezvous, "--module", *child[1:]]


class ChildRun:
    """One training child: start it, pump its events, stop it on timeout."""

    def __init__(
        self, run_id: str, writer: RunWriter | None, timeout: float | None, on_event: OnEvent
    ) -> None:
        self.run_id = run_id
        #: None on a node other than 0 of a multi-node run: that node records nothing
        self.writer = writer
        self.log_path = Path()
        self.timeout = timeout
        self.deadline: float | None = None
        self.on_event = on_event
        self.metrics: list[dict[str, Any]] = []
        #: the child's result (its training stats and what it saved), once it sent one
        self.result: ChildDone | None = None
        #: the error the child reported, if it did
        self.error: ChildFailed | None = None
        self.timed_out = False
        self.returncode: int | None = None

    def run(self, command: list[str], events: Path, log_path: Path) -> None:
        """Run ``command`` (the child, or the launcher starting one per rank) with its output in
        ``log_path``, reading its events from the FIFO ``events`` until it ends."""
        self.log_path = log_path
        events.unlink(missing_ok=True)  # left by an attempt that was killed
        os.mkfifo(events, 0o600)
        # Opened before the child starts, so the child's open for writing never waits.
        read_fd = os.open(events, os.O_RDONLY | os.O_NONBLOCK)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONSAFEPATH": "1"}
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        self.deadline = time.monotonic() + self.timeout if self.timeout else None
        try:
            self._pump(proc, read_fd)
            remaining = None if self.deadline is None else max(1.0, self.deadline - time.monotonic())
            try:
                self.returncode = proc.wait(timeout=remaining)
            except subprocess.TimeoutExpired:
                self.timed_out = True
                self._kill(proc)
                self.returncode = proc.wait()
        except BaseException:
            self._kill(proc)
            raise
        finally:
            os.close(read_fd)
            events.unlink(missing_ok=True)

    def _pump(self, proc: subprocess.Popen[bytes], read_fd: int) -> None:
        """Handle event lines until the writer closes the FIFO, the child ends, or time runs out."""
        buffer, connected = b"", False
        while True:
            wait = 0.5 if self.deadline is None else max(0.0, min(0.5, self.deadline - time.monotonic()))
            ready, _, _ = select.select([read_fd], [], [], wait)
            chunk = os.read(read_fd, 1 << 16) if ready else b""
            if chunk:
                connected = True
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    self._receive(line)
            elif ready and connected:
                return  # the child closed its end: it is exiting
            elif proc.poll() is not None:
                return  # ended without (or before) writing
            elif ready:
                time.sleep(0.05)  # no writer yet, and this system reports that as readable
            if self.deadline is not None and time.monotonic() >= self.deadline:
                self.timed_out = True
                self._kill(proc)
                return

    @staticmethod
    def _kill(proc: subprocess.Popen[bytes]) -> None:
        """Stop the child and anything it started (its own process group)."""
        if proc.poll() is not None:
            return
        for sig, grace in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                proc.wait(timeout=grace)
                return
            except subprocess.TimeoutExpired:
                continue

    def _receive(self, line: bytes) -> None:
        """Handle one line of the FIFO; one that is no event (torn, or not ours) is skipped."""
        try:
            event = event_from_dict(json.loads(line))
        except ValueError:
            return
        if event is not None:
            self._handle(event)

    def _handle(self, event: Event) -> None:
        """Keep what the run's end needs, record what changes the run, pass progress on."""
        writer = self.writer
        match event:
            case ChildDone():
                self.result = event
            case ChildFailed():
                self.error = event
            case CheckpointSaved(step=step):
                if writer is not None:
                    writer.attempt["last_checkpoint"] = step
                    writer.write()
            case MetricLogged(metric=metric):
                self.metrics.append(metric.to_dict())
                if writer is not None:
                    writer.append_metric({**metric.to_dict(), "attempt": writer.attempt["attempt"]})
                self.on_event(event)
            case ModelLoaded():
                if writer is not None:
                    _record_loaded(event, writer)
                self.on_event(event)
            case _:
                self.on_event(event)

    def failure(self) -> TrainError | None:
        """The reason the run failed, or None when it succeeded."""
        log = self.log_path
        if self.timed_out:
            return TrainError(
                f"training timed out after {self.timeout:g}s and was stopped",
                "raise --timeout, or lower --epochs / --max-steps",
            )
        if self.error is not None:
            if self.error.cause == "train":
                cls = TrainConfigError if self.error.exit_code == 2 else TrainError
                return cls(self.error.message, self.error.hint)
            return TrainError(f"training process failed: {self.error.message}", f"traceback in {log}")
        if self.returncode is not None and self.returncode < 0:
            name = signal.Signals(-self.returncode).name
            return TrainError(
                f"training process was killed by {name}", f"out of memory? see {log} and the system log"
            )
        if self.returncode != 0 or self.result is None:
            return TrainError(
                f"training process exited with code {self.returncode} without a result", f"see {log}"
            )
        return None


def _record_loaded(event: ModelLoaded, writer: RunWriter) -> None:
    """What the child loaded: the backend and settings it resolved, parameter counts, the padding id."""
    record = writer.record
    record.backend = event.backend
    record.resolved = event.resolved
    record.model.update(
        trainable_params=event.trainable_params,
        total_params=event.total_params,
        trainable_percent=event.trainable_percent,
        pad_token_id=event.pad_token_id,
    )
    if event.note:
        record.model["note"] = event.note
    writer.write()
