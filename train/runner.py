"""`train(wh, config)`: verify, check, then train in a child process and record the run.

Order of work, each step able to stop the run with one line:
1. validate the config; resolve the dataset version (no run is recorded for an unknown one);
2. open the run record (status running) and verify every file's sha256 against the manifest;
3. pre-flight checks against the base model (vocabulary, LoRA targets, max length);
4. spawn ``python -m train.child``, stream its events into metrics.jsonl and to ``on_event``,
   enforce the timeout by killing the child's process group;
5. move the finished model from its staging folder into ``--output`` and mark the run succeeded.
Any failure after step 2 marks the run failed with the reason; nothing half-written reaches
``--output`` (the model is written to a sibling staging folder and renamed at the end).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tracebank.train import preflight
from tracebank.train.config import TrainConfig
from tracebank.train.dataset import DatasetVersion, open_version, verify
from tracebank.train.errors import TrainConfigError, TrainError
from tracebank.train.model_card import PROVENANCE_FILE, write_model_card, written_by_train
from tracebank.train.record import RunRecord, RunWriter, library_versions, new_run_id, now, summarise
from tracebank.warehouse.claims import Claim, Owner, output_claim, release, try_claim
from tracebank.warehouse.errors import TracebankError
from tracebank.warehouse.layout import scratch_key, staging_dir
from tracebank.warehouse.location import Warehouse

from tracebank.events import (
    Metric,
    OnEvent,
    RunChecked,
    RunFinished,
    RunStarted,
    event_from_dict,
)

KILL_GRACE_S = 5.0


def _check_output(output: Path, overwrite: bool, wh: Warehouse) -> None:
    """Refuse an --output that is, holds or lies inside the warehouse, and an --overwrite of a
    folder that train did not write (no tracebank.json naming a run): nothing else is ever deleted."""
    root = wh.root.resolve()
    if output == root or root in output.parents or output in root.parents:
        where = "is" if output == root else ("is inside" if root in output.parents else "contains")
        raise TrainConfigError(
            f"--output {output} {where} the warehouse {root}", "pick a model folder outside the warehouse"
        )
    if output.exists() and not output.is_dir():
        raise TrainConfigError(f"output {output} is a file", "pass --output a folder path")
    if output.is_dir() and any(output.iterdir()):
        if not overwrite:
            raise TrainConfigError(
                f"output folder {output} is not empty",
                "pick a new --output, or pass --overwrite to replace it",
            )
        if not written_by_train(output):
            raise TrainConfigError(
                f"output folder {output} was not written by tracebank train (no {PROVENANCE_FILE}); "
                "--overwrite replaces only a model folder train wrote",
                "pick a new --output, or move that folder away yourself",
            )


def _claim_output(wh: Warehouse, output: Path, owner: Owner) -> Claim:
    """Claim ``output`` for this run, so two trains with the same --output cannot both publish."""
    path = output_claim(wh, output)
    holder = try_claim(path, owner)
    if holder is not None:
        raise TrainError(
            f"output folder {output} is being written by {holder.describe()}",
            "wait for that run to end, or pick another --output",
        )
    return path


def _publish(staging: Path, output: Path) -> None:
    """Move the finished model into place; an old output is removed only once the new one exists."""
    old = None
    if output.exists():
        old = output.with_name(f".{output.name}.old-{os.getpid()}")
        os.replace(output, old)
    os.replace(staging, output)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


class _ChildRun:
    """One training child: start it, pump its events, stop it on timeout."""

    def __init__(self, writer: RunWriter, spec_path: Path, timeout: float | None, on_event: OnEvent) -> None:
        self.writer = writer
        self.spec_path = spec_path
        self.timeout = timeout
        self.on_event = on_event
        self.metrics: list[dict[str, Any]] = []
        self.result: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None
        self.timed_out = False
        self.returncode: int | None = None

    def run(self) -> None:
        read_fd, write_fd = os.pipe()
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        log_path = self.writer.folder / "train.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-P", "-m", "tracebank.train.child", str(self.spec_path), str(write_fd)],
                pass_fds=(write_fd,),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        os.close(write_fd)
        deadline = time.monotonic() + self.timeout if self.timeout else None
        buffer = b""
        try:
            while True:
                wait = 0.5 if deadline is None else max(0.0, min(0.5, deadline - time.monotonic()))
                ready, _, _ = select.select([read_fd], [], [], wait)
                if ready:
                    chunk = os.read(read_fd, 1 << 16)
                    if not chunk:
                        break  # the child closed its end: it is exiting
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        self._handle(line)
                if deadline is not None and time.monotonic() >= deadline:
                    self.timed_out = True
                    self._kill(proc)
                    break
            remaining = None if deadline is None else max(1.0, deadline - time.monotonic())
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

    def _handle(self, line: bytes) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            return
        kind = event.get("event")
        record = self.writer.record
        if kind == "loaded":
            record.backend = event["backend"]
            record.resolved = event["resolved"]
            record.model.update(
                {k: event[k] for k in ("trainable_params", "total_params", "trainable_percent")}
            )
            if event.get("note"):
                record.model["note"] = event["note"]
            self.writer.write()
        elif kind == "metric":
            metric = Metric.from_dict(event).to_dict()
            self.metrics.append(metric)
            self.writer.append_metric(metric)
        elif kind == "done":
            self.result = event
        elif kind == "error":
            self.error = event
        typed = event_from_dict({"run_id": record.run_id, **event})
        if typed is not None:
            self.on_event(typed)

    def failure(self) -> TrainError | None:
        """The reason the run failed, or None when it succeeded."""
        log = self.writer.folder / "train.log"
        if self.timed_out:
            return TrainError(
                f"training timed out after {self.timeout:g}s and was stopped",
                "raise --timeout, or lower --epochs / --max-steps",
            )
        if self.error is not None:
            if self.error.get("kind") == "train":
                cls = TrainConfigError if self.error.get("exit_code") == 2 else TrainError
                return cls(self.error["message"], self.error.get("hint"))
            return TrainError(f"training process failed: {self.error['message']}", f"traceback in {log}")
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


def _spec(
    config: TrainConfig,
    version: DatasetVersion,
    plan: preflight.Plan,
    base: Path,
    staging: Path,
    scratch: Path,
    logging_dir: Path,
) -> dict[str, Any]:
    return {
        "config": config.to_dict(),
        "base_model": str(base),
        "splits": {split: [str(p) for p in paths] for split, paths in version.split_files().items()},
        "keep_rows": plan.keep_rows,
        "max_length": plan.max_length,
        "truncate": plan.dataset_max_length > plan.max_length,
        "max_token_id": plan.max_token_id,
        "staging_dir": str(staging),
        "scratch_dir": str(scratch),
        # Trackers that write files (tensorboard) write them beside the run record, not into
        # the scratch folder that is removed at the end.
        "logging_dir": str(logging_dir),
    }


_CHECKED_FIELDS = ("rows", "max_length", "truncated_rows")


def train(wh: Warehouse, config: TrainConfig, on_event: OnEvent | None = None) -> RunRecord:
    """Train ``config.base_model`` on ``config.dataset``; return the run record (status succeeded).

    Raises a TracebankError (one line) on any failure; once the run has started, its record
    is marked failed with the same message first.
    """
    emit = on_event or (lambda event: None)
    config.validate()
    wh.check_format()
    version = open_version(wh, config.dataset)
    output = Path(config.output).expanduser().resolve()
    base = Path(config.base_model).expanduser().resolve()
    _check_output(output, config.overwrite, wh)

    run_id = new_run_id(version.ref.name)
    owner = Owner.current(f"train run {run_id}")
    claim = _claim_output(wh, output, owner)
    record = RunRecord(
        run_id=run_id,
        status="running",
        dataset=version.label,
        content_hash=version.content_hash,
        base_model=str(base),
        backend=config.backend,
        output_dir=str(output),
        save=config.save,
        hyperparameters=config.to_dict(),
        libraries=library_versions(),
        started_at=now(),
        owner=owner.to_dict(),
    )
    try:
        _check_output(output, config.overwrite, wh)  # again: another run may have published meanwhile
        writer = RunWriter(wh, record)
    except BaseException:
        release(claim, owner)
        raise
    record.log_file = str(writer.folder / "train.log")
    emit(RunStarted(run_id=run_id, dataset=version.label, run_dir=str(writer.folder)))
    scratch = wh.root / scratch_key(run_id)
    staging = staging_dir(output, run_id)
    wall = time.perf_counter()
    try:
        verify(version)
        facts = preflight.model_facts(base)
        plan = preflight.plan(config, version, facts)
        record.data = {
            "rows": plan.rows,
            "max_length": plan.max_length,
            "dataset_max_length": plan.dataset_max_length,
            "max_token_id": plan.max_token_id,
            "truncated_rows": plan.truncated_rows,
            "dropped_rows": plan.dropped_rows,
            "trained_tokens_per_epoch": plan.trained_tokens,
        }
        record.model = {
            "model_type": facts.model_type,
            "vocab_size": facts.vocab_size,
            "max_positions": facts.max_positions,
        }
        writer.write()
        emit(
            RunChecked(
                run_id=run_id,
                rows=plan.rows,
                max_length=plan.max_length,
                truncated_rows=plan.truncated_rows,
                extra={
                    k: v for k, v in record.data.items() if k not in ("rows", "max_length", "truncated_rows")
                },
            )
        )

        scratch.mkdir(parents=True, exist_ok=True)
        output.parent.mkdir(parents=True, exist_ok=True)
        spec_path = scratch / "spec.json"
        spec_path.write_text(
            json.dumps(
                _spec(config, version, plan, base, staging, scratch, wh.run_dir(run_id) / "tracker-logs"),
                indent=2,
            )
        )
        child = _ChildRun(writer, spec_path, config.timeout, emit)
        child.run()
        failure = child.failure()
        record.summary = {**summarise(child.metrics), "wall_s": round(time.perf_counter() - wall, 3)}
        if child.result is not None:
            stats = dict(child.result.get("stats", {}))
            record.best_checkpoint = stats.pop("best_checkpoint", None)
            record.summary.update(stats)
            record.model["saved"] = child.result.get("saved")
        if failure is not None:
            raise failure
        write_model_card(staging, record)  # provenance travels with the model folder, and marks it
        _publish(staging, output)
    except TracebankError as exc:
        writer.finish("failed", exc.one_line())
        raise
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM through the CLI's handler
        writer.finish("failed", f"interrupted by {exc}" if str(exc) else "interrupted")
        raise
    except Exception as exc:
        writer.finish("failed", f"{type(exc).__name__}: {exc}")
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(staging, ignore_errors=True)
        release(claim, owner)
    writer.finish("succeeded")
    emit(RunFinished(run_id=run_id, status="succeeded", summary=record.summary, output_dir=str(output)))
    return record
