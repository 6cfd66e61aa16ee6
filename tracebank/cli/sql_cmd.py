"""`tracebank sql`: read-only SQL over the warehouse views."""

from __future__ import annotations

import click

from tracebank.cli.output import render


@click.command()
@click.argument("statement")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "csv", "json"]),
    default="table",
    show_default=True,
    help="Output format.",
)
@click.pass_obj
def sql(wh, statement: str, fmt: str) -> None:
    """Run a read-only SQL STATEMENT over the warehouse views.

    Tables: rollouts, attempts, spans, llm_calls, rewards, messages,
    dataset_rows, collections, datasets, runs, run_metrics.
    """
    from tracebank.warehouse.query import run_sql

    click.echo(render(run_sql(wh, statement), fmt))
