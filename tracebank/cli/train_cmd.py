"""`tracebank train`, `tracebank runs list|show`, `tracebank inspect`: thin wrappers over `train`."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from tracebank.cli.options import (
    CONFIG_FILE_KEY,
    config_file_option,
    config_option,
    config_yaml,
    flag_names,
    format_option,
    given_on_command_line,
    pass_warehouse,
    replay_format_option,
)
from tracebank.cli.output import echo_rows, say
from tracebank.cli.progress import Progress
from tracebank.train.config import (
    BACKENDS,
    DPO_LOSSES,
    EVAL_STRATEGIES,
    FINETUNE,
    METHODS,
    SAVE_METHODS,
    TrainConfig,
)


def _train_option(name: str, *flags: str, **extra: Any) -> Any:
    return config_option(TrainConfig, name, *flags, **extra)


@click.command()
@config_file_option
@_train_option("dataset")
@_train_option("base_model")
@_train_option("output")
@_train_option("backend", type=click.Choice(BACKENDS))
@_train_option("save", type=click.Choice(SAVE_METHODS))
@_train_option("overwrite")
@_train_option("epochs")
@_train_option("max_steps")
@_train_option("learning_rate", "--lr")
@_train_option("batch_size")
@_train_option("grad_accum")
@_train_option("warmup_steps")
@_train_option("lr_scheduler")
@_train_option("weight_decay")
@_train_option("lora_r")
@_train_option("lora_alpha")
@_train_option("lora_dropout")
@click.option(
    "--target-modules",
    default=None,
    help="Comma-separated LoRA targets (default: the seven Qwen projections).",
)
@_train_option("max_length")
@_train_option("truncate")
@_train_option("load_in_4bit")
@_train_option("optim")
@_train_option("bf16")
@_train_option("gradient_checkpointing")
@_train_option("eval_strategy", type=click.Choice(EVAL_STRATEGIES))
@_train_option("eval_steps")
@_train_option("early_stopping_patience")
@_train_option("logging_steps")
@_train_option("report_to", multiple=True, metavar="NAME", default=())
@_train_option("timeout")
@_train_option("seed")
@_train_option("method", type=click.Choice(METHODS))
@_train_option("beta")
@_train_option("dpo_loss", type=click.Choice(DPO_LOSSES))
@_train_option("save_steps")
@_train_option("save_total_limit")
@_train_option("packing")
@_train_option("attn_implementation")
@_train_option("finetune", type=click.Choice(FINETUNE))
@_train_option("fsdp")
@_train_option("nproc_per_node")
@_train_option("nnodes")
@_train_option("node_rank")
@_train_option("rdzv_endpoint", metavar="HOST:PORT")
@_train_option("extra", metavar="JSON")
@click.option(
    "--resume",
    metavar="RUN_ID",
    default=None,
    help=(
        "Continue this failed or interrupted run from its last checkpoint, with its own settings "
        "(--output DIR: into a new folder instead of the recorded one)."
    ),
)
@click.option("--quiet", is_flag=True, help="No progress on stderr; only the summary line.")
@pass_warehouse
def train(wh, quiet: bool, resume: str | None, target_modules: str | None, **options: Any) -> None:
    """Train a LoRA adapter on a dataset version and record the run."""
    progress = Progress()
    on_event = None if quiet else progress
    try:
        if resume:
            _refuse_settings_with_resume([n for n in options if n != "output"] + ["target_modules"])
            record = wh.resume(resume, on_event=on_event, output=options["output"])
        else:
            settings = _settings(options, target_modules)
            record = wh.train(settings.pop("dataset"), on_event=on_event, **settings)
    finally:
        progress.close()
    say(record.summary_line())


def _settings(options: dict[str, Any], target_modules: str | None) -> dict[str, Any]:
    """The train settings of the command's options (from flags, a --config file and defaults)."""
    from tracebank.core.errors import UsageError

    if target_modules:
        options["target_modules"] = tuple(t.strip() for t in target_modules.split(",") if t.strip())
    extra = options.pop("extra", None)
    if extra:
        try:
            options["extra"] = json.loads(extra) if isinstance(extra, str) else dict(extra)
        except ValueError as exc:
            raise UsageError(f"--extra is not a JSON object: {exc}") from exc
        if not isinstance(options["extra"], dict):
            raise UsageError("--extra must be a JSON object of SFTConfig keys")
    return options


def _refuse_settings_with_resume(names: list[str]) -> None:
    from tracebank.core.errors import UsageError

    ctx = click.get_current_context()
    given = given_on_command_line(ctx, names)
    if given or ctx.meta.get(CONFIG_FILE_KEY):
        flags = flag_names(train)
        what = ", ".join("--" + flags[n] for n in given) or "--config"
        raise UsageError(
            f"--resume continues a run with its recorded settings; {what} cannot change them",
            "drop them, or start a new run with the settings you want",
        )


@click.group(invoke_without_command=True)
@click.pass_context
def runs(ctx: click.Context) -> None:
    """Training runs recorded in the warehouse."""
    if ctx.invoked_subcommand is None:  # a bare group lists, as `git remote` does
        ctx.invoke(runs_list)


@runs.command("list")
@format_option
@pass_warehouse
def runs_list(wh, fmt: str) -> None:
    """List every run, oldest first."""
    echo_rows(wh.runs(), fmt)


@runs.command("show")
@click.argument("run_id")
@replay_format_option("train")
@pass_warehouse
def runs_show(wh, run_id: str, fmt: str) -> None:
    """Show one run (an id prefix is enough): record, summary and per-step losses."""
    from tracebank.train.runs import format_run

    details = wh.run(run_id)
    if fmt == "yaml":
        click.echo(run_config_yaml(details), nl=False)
    elif fmt == "json":
        click.echo(json.dumps(details, indent=2, sort_keys=True, default=str))
    else:
        say(format_run(details))


def run_config_yaml(details: dict[str, Any]) -> str:
    """A ``train --config`` file of a run's settings that shape the model (`warehouse.replay`), keyed
    by the train command's flags: the dataset pinned to the version it trained on, the base model as
    resolved. Where to write and how to distribute are the replaying user's (``--output``)."""
    from tracebank.warehouse.replay import defaults_of, replay_train

    replay = replay_train(details.get("hyperparameters") or {}, defaults_of(TrainConfig))
    settings = {**replay.settings, "dataset": details.get("dataset"), "base_model": details.get("base_model")}
    head = (
        f"tracebank train --config FILE --output DIR reproduces run {details.get('run_id')}\n"
        f"(dataset {details.get('dataset')}, content hash {details.get('content_hash')})"
    )
    dropped = replay.dropped_line(ignore=("output",))
    return config_yaml(train, settings, head + (f"\n{dropped}" if dropped else ""))


@click.command()
@click.argument("dataset")
@click.option("--tokenizer", required=True, help="Folder of the tokenizer (usually the base model).")
@click.option("--row", type=int, default=0, show_default=True, help="Row index within the split.")
@click.option("--split", default="train", show_default=True, help="Split to read: train or validation.")
@click.option("--color/--no-color", default=None, help="Default: when stdout is a terminal.")
@pass_warehouse
def inspect(wh, dataset: str, tokenizer: str, row: int, split: str, color: bool | None) -> None:
    """Decode a row of DATASET (NAME or NAME@vN): masked vs trained tokens, length and reward histograms."""
    use_color = sys.stdout.isatty() if color is None else color
    click.echo(
        wh.inspect(dataset, tokenizer=tokenizer, row=row, split=split, color=use_color), color=use_color
    )


COMMANDS = [train, runs, inspect]
