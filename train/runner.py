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

With ``--save-steps`` the child writes resumable checkpoints into the run's scratch folder; a
failed run keeps its whole ones, and `resume(wh, run_id)` continues from the newest as a new
attempt of the same run (one record, one entry per attempt in ``attempts``).
"""

from __future__ import annotations

import dataclasses
import functools
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracebank.core.errors import TracebankError, warn_damage
from tracebank.core.events import OnEvent, RunChecked, RunFinished, RunStarted
from tracebank.core.outputs import OutputGuard, create_staging
from tracebank.train import preflight
from tracebank.train.checkpoints import checkpoints_dir, complete_checkpoints, last_checkpoint, run_scratch
from tracebank.train.config import TrainConfig
from tracebank.train.dataset import DatasetVersion, open_version, verify
from tracebank.train.errors import TrainConfigError, TrainError
from tracebank.train.hub import resolve_base_model
from tracebank.train.model_card import write_model_card, written_by_train
from tracebank.train.record import RunRecord, RunWriter, library_versions, new_run_id, now, summarise
from tracebank.train.spec import ChildSpec
from tracebank.train.supervisor import ChildRun, child_command
from tracebank.warehouse import catalog
from tracebank.warehouse.claims import Claim, Owner, output_claim, release, try_claim
from tracebank.warehouse.layout import staging_dir
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.replay import defaults_of, replay_train
from tracebank.warehouse.storage import Storage, settle_run


def _output_guard(
    wh: Warehouse, output: Path, overwrite: bool, owned: Callable[[Path], bool] = written_by_train
) -> OutputGuard:
    """--output through the one output guard (`core/outputs.py`): never the warehouse, inside
    it or above it; never a file; --overwrite replaces only a model folder train wrote (its
    tracebank.json names a run; for a resumed run, that run), and the old folder is removed only
    once the new one is there."""
    return OutputGuard(
        output,
        kind="folder",
        warehouse_root=wh.root,
        command="train",
        overwrite=overwrite,
        overwrite_flag="--overwrite",
        owned=owned,
    )


def _run_guard(wh: Warehouse, run: _Run) -> OutputGuard:
    """The output guard of one attempt: a resumed run replaces only its own model folder."""
    if run.resume_from is None:
        return _output_guard(wh, run.output, run.config.overwrite)
    own = functools.partial(written_by_train, run_id=run.record.run_id)
    return _output_guard(wh, run.output, run.config.overwrite, owned=own)


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


def _spec(
    config: TrainConfig,
    version: DatasetVersion,
    plan: preflight.Plan,
    base: Path,
    folders: tuple[Path, Path, Path],
    resume_from: Path | None = None,
) -> ChildSpec:
    """What the child trains: ``folders`` are (staging, scratch, logging_dir)."""
    staging, scratch, logging_dir = folders
    return ChildSpec(
        config=config,
        base_model=str(base),
        splits={split: [str(p) for p in paths] for split, paths in version.split_files().items()},
        keep_rows=plan.keep_rows,
        max_length=plan.max_length,
        truncate=plan.dataset_max_length > plan.max_length,
        max_token_id=plan.max_token_id,
        staging_dir=str(staging),
        scratch_dir=str(scratch),
        events=str(scratch / "events"),
        content_hash=version.content_hash,
        # Trackers that write files (tensorboard) write them beside the run record, not into
        # the scratch folder that is removed at the end.
        logging_dir=str(logging_dir),
        resume_from=str(resume_from) if resume_from else None,
    )


def _run_child(child: ChildRun, config: TrainConfig, spec: ChildSpec, log: Path) -> None:
    """Run the child on ``spec``. The spec file is written into a folder of this user's own (mode
    0700, outside the warehouse, which co-workers may write to), so the child reads what the runner
    wrote: a spec swapped in the scratch folder could send the model anywhere (``staging_dir``)."""
    private = Path(tempfile.mkdtemp(prefix="tracebank-spec-"))
    try:
        spec_path = private / "spec.json"
        spec.write(spec_path)
        child.run(child_command(config, spec_path), Path(spec.events), log)
    finally:
        shutil.rmtree(private, ignore_errors=True)


@dataclass
class _Run:
    """What one attempt of a run works with (a fresh run, or a resumed one)."""

    config: TrainConfig
    version: DatasetVersion
    record: RunRecord
    output: Path
    base: Path
    #: (step, folder) of the checkpoint a resumed attempt continues from
    resume_from: tuple[int, Path] | None = None


def train(wh: Warehouse, config: TrainConfig, on_event: OnEvent | None = None) -> RunRecord:
    """Train ``config.base_model`` on ``config.dataset``; return the run record (status succeeded).

    Raises a TracebankError (one line) on any failure; once the run has started, its record
    is marked failed with the same message first.
    """
    config.validate()
    wh.check_format()
    version = open_version(wh, config.dataset)
    output = Path(config.output).expanduser().resolve()
    config = dataclasses.replace(config, output=str(output))  # recorded absolute: a replay elsewhere agrees
    base = resolve_base_model(config.base_model)
    _output_guard(wh, output, config.overwrite).check()
    run_id = new_run_id(version.ref.name)
    record = RunRecord(
        run_id=run_id,
        status="running",
        dataset=version.label,
        content_hash=version.content_hash,
        base_model=base.pinned,
        base_model_revision=base.revision,
        backend=config.backend,
        output_dir=str(output),
        save=config.save,
        hyperparameters=config.to_dict(),
        libraries=library_versions(),
        started_at=now(),
    )
    run = _Run(config, version, record, output, base.path)
    if config.node_rank > 0:
        return _join_as_node(wh, run, on_event or (lambda event: None))
    return _attempt(wh, run, on_event or (lambda event: None))


def _join_as_node(wh: Warehouse, run: _Run, emit: OnEvent) -> RunRecord:
    """Node ``k > 0`` of a multi-node run: check the dataset as node 0 does, run this node's ranks,
    and record nothing (node 0 records the run and writes the model). Its scratch and log are in a
    temporary folder of this machine, kept when it fails."""
    record, config = run.record, run.config
    plan = _check(run, None, emit)
    scratch = Path(tempfile.mkdtemp(prefix=f"tracebank-train-node{config.node_rank}-"))
    spec = _spec(
        config, run.version, plan, run.base, (scratch / "staging", scratch, scratch / "tracker-logs")
    )
    child = ChildRun(record.run_id, None, config.timeout, emit)
    _run_child(child, config, spec, scratch / "train.log")
    failure = child.failure()
    if failure is not None:
        raise failure
    shutil.rmtree(scratch, ignore_errors=True)
    record.status, record.finished_at = "succeeded", now()
    record.summary = {**summarise(child.metrics), **(child.result.stats if child.result else {})}
    return record


def resume(
    wh: Warehouse, run_id: str, on_event: OnEvent | None = None, output: str | None = None
) -> RunRecord:
    """Continue a failed or interrupted run from its last whole checkpoint, as a new attempt of the
    same run: same dataset version (its content hash checked), same output unless ``output`` names
    a new one.

    The record is data, not authority (`warehouse.replay`): only the settings that shape the model
    are taken from it; the run resumes on this machine as one process, and writes only into an
    output that is absent (its parent folder there) or holds this run's own model, or into the new
    ``output`` the caller names (absent or empty, as any new run's)."""
    wh.check_format()
    _, record = catalog.resolve_run(wh, run_id)
    record = settle_run(record)
    if record.status == "succeeded":
        raise TrainError(f"run {record.run_id} already succeeded", "start a new run to train again")
    if record.status == "running":
        owner = Owner.parse(record.owner)
        raise TrainError(
            f"run {record.run_id} is still running" + (f" ({owner.describe()})" if owner else ""),
            "wait for it to end, or stop it first",
        )
    if output is not None:  # the caller's word, not the record's: any new output a run may take
        chosen = Path(output).expanduser().resolve()
        _output_guard(wh, chosen, overwrite=False).check()
        record.output_dir = str(chosen)
    resumed_output, overwrite = _resume_output(record)
    config = _resume_config(record, resumed_output, overwrite)
    version = open_version(wh, record.dataset)
    if version.content_hash != record.content_hash:
        raise TrainError(
            f"dataset {record.dataset} has content hash {version.content_hash}, but run {record.run_id} "
            f"trained on {record.content_hash}",
            "the version was replaced; start a new run on it",
        )
    found = last_checkpoint(run_scratch(wh, record.run_id))
    if found is None:
        raise TrainError(
            f"run {record.run_id} left no checkpoint to resume from",
            "it ran without --save-steps or stopped before its first checkpoint; start a new run",
        )
    base = resolve_base_model(record.base_model).path
    run = _Run(config, version, record, resumed_output, base, resume_from=found)
    _run_guard(wh, run).check()
    if record.attempts and record.attempts[-1]["status"] == "running":  # killed: nobody wrote its end
        record.attempts[-1].update(status="failed", error=record.error)
    record.status, record.error, record.finished_at = "running", None, None
    record.hyperparameters = config.to_dict()  # what this attempt runs with
    return _attempt(wh, run, on_event or (lambda event: None))


def _resume_output(record: RunRecord) -> tuple[Path, bool]:
    """The output a resumed run may write, and whether it replaces a folder there: the recorded
    ``output_dir`` only when it is an absolute path that is absent (its parent folder existing:
    a record never makes tracebank create folders) or holds this run's own model."""
    output = Path(record.output_dir)
    hint = "resume into a new folder with --output DIR, or start a new run"
    if not output.is_absolute():
        raise TrainError(f"run {record.run_id} records output {str(output)!r}, not an absolute path", hint)
    if output.is_symlink() or output.exists():
        if output.is_dir() and not output.is_symlink() and not any(output.iterdir()):
            return output, False
        if output.is_symlink() or not written_by_train(output, run_id=record.run_id):
            raise TrainError(
                f"run {record.run_id}'s output {output} holds what another run (or not tracebank) wrote; "
                "resume writes only into its own",
                hint,
            )
        return output, True
    if not output.parent.is_dir():
        raise TrainError(f"run {record.run_id}'s output folder {output.parent} does not exist", hint)
    return output, False


def _resume_config(record: RunRecord, output: Path, overwrite: bool) -> TrainConfig:
    """The TrainConfig of a resumed attempt: the record's settings that `warehouse.replay` lets a
    record decide, on one node as one process; what else it asked for is said in one warning."""
    replay = replay_train(record.hyperparameters, defaults_of(TrainConfig))
    try:
        config = TrainConfig(
            **{
                **replay.settings,
                "dataset": record.dataset,
                "base_model": record.base_model,
                "output": str(output),
                "overwrite": overwrite,
            }
        ).validate()
    except (TypeError, ValueError) as exc:  # a record of the right shape with values of the wrong type
        raise TrainError(
            f"run {record.run_id}'s record holds settings of the wrong type ({exc})", "start a new run"
        ) from exc
    dropped = replay.dropped_line(ignore=("output", "overwrite", "dataset", "base_model"))
    if dropped:
        warn_damage(f"run {record.run_id}: {dropped}; resuming on this machine as one process")
    return config


def _attempt(wh: Warehouse, run: _Run, emit: OnEvent) -> RunRecord:
    """Claim the output, open the run record and train; the record ends succeeded or failed."""
    record = run.record
    owner = Owner.current(f"train run {record.run_id}")
    record.owner = owner.to_dict()
    claim = _claim_output(wh, run.output, owner)
    try:
        # again: another run may have published meanwhile
        _run_guard(wh, run).check()
        writer = RunWriter(wh, record, resumed_from_step=run.resume_from[0] if run.resume_from else None)
    except BaseException:
        release(claim, owner)
        raise
    record.log_file = str(writer.folder / "train.log")
    emit(RunStarted(run_id=record.run_id, dataset=run.version.label, run_dir=str(writer.folder)))
    scratch = run_scratch(wh, record.run_id)
    staging = staging_dir(run.output, record.run_id)
    succeeded = False
    try:
        _train_and_publish(wh, run, writer, scratch, staging, emit)
        succeeded = True
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
        _clean_scratch(scratch, keep_checkpoints=not succeeded)
        shutil.rmtree(staging, ignore_errors=True)
        release(claim, owner)
    writer.finish("succeeded")
    emit(
        RunFinished(
            run_id=record.run_id, status="succeeded", summary=record.summary, output_dir=str(run.output)
        )
    )
    return record


def _clean_scratch(scratch: Path, keep_checkpoints: bool) -> None:
    """Remove a run's scratch; a failed run keeps its whole checkpoints, for ``--resume``."""
    if not (keep_checkpoints and complete_checkpoints(scratch)):
        shutil.rmtree(scratch, ignore_errors=True)
        return
    for entry in scratch.iterdir():
        if entry != checkpoints_dir(scratch):
            shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)


_CHECKED_FIELDS = ("rows", "max_length", "truncated_rows")


def _check(run: _Run, writer: RunWriter | None, emit: OnEvent) -> preflight.Plan:
    """Verify the dataset's hashes and run the pre-flight checks; record what they found."""
    record = run.record
    verify(run.version)
    facts = preflight.model_facts(run.base)
    plan = preflight.plan(run.config, run.version, facts)
    check_checkpointing(run.config, plan)
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
    if writer is not None:
        writer.write()
    emit(
        RunChecked(
            run_id=record.run_id,
            rows=plan.rows,
            max_length=plan.max_length,
            truncated_rows=plan.truncated_rows,
            extra={k: v for k, v in record.data.items() if k not in _CHECKED_FIELDS},
        )
    )
    return plan


def _train_and_publish(
    wh: Warehouse, run: _Run, writer: RunWriter, scratch: Path, staging: Path, emit: OnEvent
) -> None:
    record, config = run.record, run.config
    wall = time.perf_counter()
    earlier = _earlier_metrics(wh, run)
    plan = _check(run, writer, emit)
    scratch.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(staging, ignore_errors=True)  # a killed attempt's half-saved model
    run.output.parent.mkdir(parents=True, exist_ok=True)
    create_staging(staging, record.run_id, record.owner or {})  # its mark lets gc remove it if we die
    folders = (staging, scratch, wh.run_dir(record.run_id) / "tracker-logs")
    spec = _spec(
        config, run.version, plan, run.base, folders, run.resume_from[1] if run.resume_from else None
    )
    child = ChildRun(record.run_id, writer, config.timeout, emit)
    _run_child(child, config, spec, writer.folder / "train.log")
    failure = child.failure()
    record.summary = {**summarise(earlier + child.metrics), "wall_s": round(time.perf_counter() - wall, 3)}
    if child.result is not None:
        stats = dict(child.result.stats)
        record.best_checkpoint = stats.pop("best_checkpoint", None)
        record.summary.update(stats)
        record.model["saved"] = child.result.saved
    if failure is not None:
        raise failure
    write_model_card(staging, record)  # provenance travels with the model folder, and marks it
    _run_guard(wh, run).publish(staging, record.run_id, record.owner)


def _earlier_metrics(wh: Warehouse, run: _Run) -> list[dict[str, Any]]:
    """Metrics of earlier attempts up to the checkpoint this attempt resumes from (the summary
    covers the whole run; steps after that checkpoint are trained again)."""
    if run.resume_from is None:
        return []
    folder = wh.run_dir(run.record.run_id)
    step = run.resume_from[0]
    return [m for m in Storage(wh).run_metrics(folder) if (m.get("step") or 0) <= step]


def check_checkpointing(config: TrainConfig, plan: preflight.Plan) -> None:
    """Resumable checkpoints and keeping the best evaluation share transformers' save schedule."""
    evaluates = "validation" in plan.rows and config.eval_strategy != "no"
    if not (config.save_steps and evaluates):
        return
    if config.eval_strategy == "epoch" or config.save_steps % (config.eval_steps or 1):
        raise TrainConfigError(
            "--save-steps with a validation split needs --eval-strategy steps and --save-steps a "
            "multiple of --eval-steps (the best evaluation is picked among the saved checkpoints)",
            f"add --eval-strategy steps --eval-steps {config.save_steps}, or --eval-strategy no",
        )
