"""`tracebank show`, `tracebank report`, `tracebank export`: thin wrappers over the view stage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from tracebank.cli.options import config_option, pass_warehouse
from tracebank.cli.output import say
from tracebank.view.config import EXPORT_FORMATS, PREFERENCE_FORMATS, ExportConfig, ReportConfig, ShowConfig


@click.command()
@click.argument("rollout", required=False)
@config_option(ShowConfig, "best", metavar="N")
@config_option(ShowConfig, "worst", metavar="N")
@config_option(ShowConfig, "dataset", metavar="NAME[@vN]")
@config_option(ShowConfig, "row", metavar="N")
@config_option(ShowConfig, "tokenizer", metavar="DIR")
@config_option(ShowConfig, "max_chars", metavar="N")
@pass_warehouse
def show(wh: Any, rollout: str | None, **options: Any) -> None:
    """Show a ROLLOUT (or the best/worst N, or a dataset row) as a conversation."""
    click.echo(wh.show(rollout, **options))


@click.command()
@config_option(
    ReportConfig,
    "output",
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("report.html"),
)
@config_option(ReportConfig, "datasets", "--dataset", multiple=True, metavar="NAME[@vN]", default=())
@config_option(ReportConfig, "collections", "--collection", multiple=True, metavar="ID", default=())
@config_option(ReportConfig, "runs", "--run", multiple=True, metavar="RUN", default=())
@config_option(ReportConfig, "tokenizer", metavar="DIR")
@config_option(ReportConfig, "conversations", metavar="N")
@pass_warehouse
def report(wh: Any, **options: Any) -> None:
    """Write a self-contained HTML report (plots and conversations, no network needed)."""
    say(wh.report(**options).summary())


@click.command()
@click.argument("dataset", metavar="NAME[@vN]")
@config_option(ExportConfig, "format", "--to", type=click.Choice(EXPORT_FORMATS + PREFERENCE_FORMATS))
@config_option(ExportConfig, "output", "--output", "-o", type=click.Path(path_type=Path), required=True)
@config_option(ExportConfig, "tokenizer", metavar="DIR")
@config_option(ExportConfig, "split", type=click.Choice(["train", "validation"]))
@config_option(ExportConfig, "force")
@pass_warehouse
def export(wh: Any, dataset: str, **options: Any) -> None:
    """Export dataset version NAME[@vN] as chat data (OpenAI JSONL, TRL rows or an HF folder)."""
    to = options.pop("format")
    say(wh.export(dataset, to=to, **options).summary())


COMMANDS = [show, report, export]
