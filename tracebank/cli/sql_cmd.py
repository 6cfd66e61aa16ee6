"""`tracebank sql`: read-only SQL over the warehouse views."""

from __future__ import annotations

import click

from tracebank.cli.options import format_option, pass_warehouse
from tracebank.cli.output import echo_rows


@click.command()
@click.argument("statement")
@format_option
@pass_warehouse
def sql(wh, statement: str, fmt: str) -> None:
    """Run a read-only SQL STATEMENT over the warehouse views.

    Tables: rollouts, attempts, spans, llm_calls, rewards, messages,
    dataset_rows, collections, datasets, runs, run_metrics.
    """
    from tracebank.warehouse.query import run_sql

    echo_rows(run_sql(wh, statement), fmt)
