"""`tracebank show`, `tracebank report`, `tracebank export`: thin wrappers over the view stage."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.argument("rollout", required=False)
@click.option("--best", type=int, default=0, help="Show the N rollouts with the highest final reward.")
@click.option("--worst", type=int, default=0, help="Show the N rollouts with the lowest final reward.")
@click.option("--dataset", default=None, metavar="NAME[@vN]", help="Show a row of this dataset version.")
@click.option("--row", type=int, default=0, show_default=True, help="Row number with --dataset.")
@click.option(
    "--tokenizer", default=None, metavar="DIR", help="With --dataset: mark the tokens the version trains on."
)
@click.option(
    "--max-chars", type=int, default=2000, show_default=True, help="Cut longer messages (0: never)."
)
@click.pass_obj
def show(wh, rollout, best, worst, dataset, row, tokenizer, max_chars) -> None:
    """Show a ROLLOUT (or the best/worst N, or a dataset row) as a conversation."""
    from tracebank.view import ShowConfig
    from tracebank.view import show as show_view

    config = ShowConfig(
        rollout_id=rollout,
        best=best,
        worst=worst,
        dataset=dataset,
        row=row,
        tokenizer=tokenizer,
        max_chars=max_chars,
    )
    click.echo(show_view(wh, config))


@click.command()
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("report.html"),
    show_default=True,
    help="The HTML file to write.",
)
@click.option(
    "--dataset", "datasets", multiple=True, metavar="NAME[@vN]", help="Cover this version (repeatable)."
)
@click.option(
    "--collection", "collections", multiple=True, metavar="ID", help="Cover this collection (repeatable)."
)
@click.option("--run", "runs", multiple=True, metavar="RUN", help="Cover this run (repeatable).")
@click.option("--tokenizer", default=None, metavar="DIR", help="Tokenizer for token highlighting.")
@click.option("--conversations", type=int, default=6, show_default=True, help="Rows shown per version.")
@click.pass_obj
def report(wh, output, datasets, collections, runs, tokenizer, conversations) -> None:
    """Write a self-contained HTML report (plots and conversations, no network needed)."""
    from tracebank.view import ReportConfig
    from tracebank.view import report as report_view

    config = ReportConfig(
        output=output,
        datasets=datasets,
        collections=collections,
        runs=runs,
        tokenizer=tokenizer,
        conversations=conversations,
    )
    click.echo(report_view(wh, config).summary())


@click.command()
@click.argument("dataset", metavar="NAME[@vN]")
@click.option(
    "--to",
    "fmt",
    type=click.Choice(["openai", "trl-messages", "trl-prompt-completion", "hf"]),
    default="openai",
    show_default=True,
    help="Output format.",
)
@click.option(
    "--output", "-o", type=click.Path(path_type=Path), required=True, help="JSONL file, or folder for hf."
)
@click.option(
    "--tokenizer", default=None, metavar="DIR", help="Check the round trip with this chat template."
)
@click.option("--split", type=click.Choice(["train", "validation"]), default=None, help="Only this split.")
@click.option("--force", is_flag=True, help="Overwrite an existing output.")
@click.pass_obj
def export(wh, dataset, fmt, output, tokenizer, split, force) -> None:
    """Export dataset version NAME[@vN] as chat data (OpenAI JSONL, TRL rows or an HF folder)."""
    from tracebank.view import ExportConfig
    from tracebank.view import export as export_view

    config = ExportConfig(
        dataset=dataset, output=output, format=fmt, tokenizer=tokenizer, split=split, force=force
    )
    click.echo(export_view(wh, config).summary())


COMMANDS = [show, report, export]
