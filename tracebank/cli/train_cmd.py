"""`tracebank train`, `tracebank runs list|show`, `tracebank inspect`: thin wrappers over `train`."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

import click

from tracebank.cli.output import render
from tracebank.train.config import TrainConfig

#: The CLI's defaults are TrainConfig's (it imports nothing heavy), so they are written once.
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(TrainConfig)}


def _fmt_loss(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, int | float) else "n/a"


class _Progress:
    """Prints the training child's events as they arrive, one line each."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.max_steps: int | None = None

    def __call__(self, event: dict[str, Any]) -> None:
        if self.quiet:
            return
        kind = event.get("event")
        line = None
        if kind == "run":
            line = f"run {event['run_id']}: training on {event['dataset']}"
        elif kind == "checked":
            rows = ", ".join(f"{n} {split}" for split, n in event["rows"].items())
            line = f"checked: {rows} rows, max length {event['max_length']} tokens" + (
                f", {event['truncated_rows']} row(s) truncated" if event.get("truncated_rows") else ""
            )
        elif kind == "loaded":
            r = event["resolved"]
            precision = "bf16" if r["bf16"] else "fp32"
            line = (
                f"backend {r['backend']} on {r['device']} ({precision}, {r['optim']}"
                + (", 4-bit base" if r["load_in_4bit"] else "")
                + f"): {event['trainable_params']:,} "
                f"trainable of {event['total_params']:,} parameters ({event['trainable_percent']:.2f}%)"
            )
            if event.get("note"):
                line += f"\nnote: {event['note']}"
        elif kind == "train_begin":
            self.max_steps = event.get("max_steps")
        elif kind == "metric":
            of = f"/{self.max_steps}" if self.max_steps else ""
            epoch = f"  epoch {event['epoch']:.2f}" if event.get("epoch") is not None else ""
            if event["split"] == "train":
                lr = f"  lr {event['learning_rate']:.2e}" if event.get("learning_rate") is not None else ""
                line = f"step {event['step']}{of}{epoch}  loss {_fmt_loss(event['loss'])}{lr}"
            else:
                line = f"eval at step {event['step']}{of}{epoch}  eval_loss {_fmt_loss(event['loss'])}"
        elif kind == "saved":
            line = f"saved {event.get('save')}" + (f" ({event['dtype']})" if event.get("dtype") else "")
        if line:
            click.echo(line)


def _summary_line(record: Any) -> str:
    s = record.summary
    eval_part = (
        f", eval best {_fmt_loss(s.get('eval_loss_best'))}" if s.get("eval_loss_best") is not None else ""
    )
    speed = f"{s['tokens_per_s']:,.0f} tokens/s" if s.get("tokens_per_s") else "n/a tokens/s"
    best = record.best_checkpoint
    if best and best.get("step") != s.get("steps"):
        eval_part += f" (kept the step-{best['step']} checkpoint)"
    return (
        f"run {record.run_id} {record.status}: loss {_fmt_loss(s.get('train_loss_first'))} -> "
        f"{_fmt_loss(s.get('train_loss_last'))}{eval_part}, {s.get('steps')} steps, {speed}, "
        f"output {record.output_dir}"
    )


@click.command()
@click.option("--dataset", required=True, help="Dataset version: NAME (latest) or NAME@vN.")
@click.option("--base-model", required=True, help="Local folder of the base model.")
@click.option("--output", required=True, help="Folder to write the trained model to.")
@click.option(
    "--backend",
    type=click.Choice(["auto", "unsloth", "trl"]),
    default="auto",
    show_default=True,
    help="auto: Unsloth on CUDA when installed, else TRL+PEFT.",
)
@click.option(
    "--save",
    type=click.Choice(["merged_16bit", "lora"]),
    default="merged_16bit",
    show_default=True,
    help="merged_16bit: full weights for vLLM; lora: adapter only (vllm --enable-lora).",
)
@click.option("--overwrite", is_flag=True, help="Replace a non-empty --output folder.")
@click.option("--epochs", type=float, default=_DEFAULTS["epochs"], show_default=True)
@click.option(
    "--max-steps", type=int, default=None, help="Stop after N optimizer steps (overrides --epochs)."
)
@click.option("--lr", "learning_rate", type=float, default=_DEFAULTS["learning_rate"], show_default=True)
@click.option("--batch-size", type=int, default=_DEFAULTS["batch_size"], show_default=True)
@click.option("--grad-accum", type=int, default=_DEFAULTS["grad_accum"], show_default=True)
@click.option("--warmup-steps", type=int, default=_DEFAULTS["warmup_steps"], show_default=True)
@click.option("--lr-scheduler", default=_DEFAULTS["lr_scheduler"], show_default=True)
@click.option("--weight-decay", type=float, default=_DEFAULTS["weight_decay"], show_default=True)
@click.option("--lora-r", type=int, default=_DEFAULTS["lora_r"], show_default=True)
@click.option("--lora-alpha", type=int, default=_DEFAULTS["lora_alpha"], show_default=True)
@click.option("--lora-dropout", type=float, default=_DEFAULTS["lora_dropout"], show_default=True)
@click.option(
    "--target-modules",
    default=None,
    help="Comma-separated LoRA targets (default: the seven Qwen projections).",
)
@click.option("--max-length", type=int, default=None, help="Longest row in tokens (default: the dataset's).")
@click.option("--truncate", is_flag=True, help="Cut rows longer than --max-length instead of refusing.")
@click.option("--load-in-4bit/--no-load-in-4bit", default=None, help="Default: on CUDA when possible.")
@click.option("--optim", default=None, help="Optimizer (default: adamw_8bit on CUDA, else adamw_torch).")
@click.option("--bf16/--no-bf16", default=None, help="Default: when the GPU supports it.")
@click.option("--gradient-checkpointing/--no-gradient-checkpointing", default=None, help="Default: on CUDA.")
@click.option(
    "--eval-strategy",
    type=click.Choice(["epoch", "steps", "no"]),
    default="epoch",
    show_default=True,
    help="When the version has a validation split.",
)
@click.option("--eval-steps", type=int, default=None)
@click.option(
    "--early-stopping-patience",
    type=int,
    default=0,
    show_default=True,
    help="Evaluations without improvement before stopping (0: never).",
)
@click.option("--logging-steps", type=int, default=_DEFAULTS["logging_steps"], show_default=True)
@click.option(
    "--timeout", type=float, default=None, help="Seconds before training is stopped and recorded failed."
)
@click.option("--seed", type=int, default=_DEFAULTS["seed"], show_default=True)
@click.option("--quiet", is_flag=True, help="Print only the summary line.")
@click.pass_obj
def train(wh, quiet: bool, target_modules: str | None, **options: Any) -> None:
    """Train a LoRA adapter on a dataset version and record the run."""
    from tracebank.train import TrainConfig
    from tracebank.train import train as run_training

    if target_modules:
        options["target_modules"] = tuple(t.strip() for t in target_modules.split(",") if t.strip())
    record = run_training(wh, TrainConfig(**options), on_event=_Progress(quiet))
    click.echo(_summary_line(record))


@click.group()
def runs() -> None:
    """Training runs recorded in the warehouse."""


@runs.command("list")
@click.option(
    "--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True
)
@click.pass_obj
def runs_list(wh, fmt: str) -> None:
    """List every run, oldest first."""
    from tracebank.train import runs_table

    click.echo(render(runs_table(wh), fmt))


@runs.command("show")
@click.argument("run_id")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.pass_obj
def runs_show(wh, run_id: str, fmt: str) -> None:
    """Show one run (an id prefix is enough): record, summary and per-step losses."""
    from tracebank.train import run_details
    from tracebank.train.runs import format_run

    details = run_details(wh, run_id)
    click.echo(
        json.dumps(details, indent=2, sort_keys=True, default=str) if fmt == "json" else format_run(details)
    )


@click.command()
@click.argument("dataset")
@click.option("--tokenizer", required=True, help="Folder of the tokenizer (usually the base model).")
@click.option("--row", type=int, default=0, show_default=True, help="Row index within the split.")
@click.option("--split", default="train", show_default=True)
@click.option("--color/--no-color", default=None, help="Default: when stdout is a terminal.")
@click.pass_obj
def inspect(wh, dataset: str, tokenizer: str, row: int, split: str, color: bool | None) -> None:
    """Decode a row of DATASET (NAME or NAME@vN): masked vs trained tokens, length and reward histograms."""
    from tracebank.train import inspect_dataset

    use_color = sys.stdout.isatty() if color is None else color
    click.echo(
        inspect_dataset(wh, dataset, tokenizer, row=row, split=split, color=use_color), color=use_color
    )


COMMANDS = [train, runs, inspect]
