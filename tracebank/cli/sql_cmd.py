"""`tracebank sql`: read-only SQL over the warehouse views."""

from __future__ import annotations

from typing import Any

import click

from tracebank.cli.options import config_option, format_option, pass_warehouse
from tracebank.cli.output import echo_rows
from tracebank.cli.readable import Limits


@click.command()
@click.argument("statement", required=False)
@click.option("--file", "-f", "file", metavar="PATH", help="Read the statement from this file ('-': stdin).")
@click.option(
    "--param",
    "-p",
    "params",
    multiple=True,
    metavar="NAME=VALUE",
    help="Bind $NAME in the statement (repeatable).",
)
@config_option(Limits, "max_rows", metavar="N")
@config_option(Limits, "max_width", metavar="N")
@format_option
@pass_warehouse
def sql(
    wh: Any,
    statement: str | None,
    file: str | None,
    params: tuple[str, ...],
    max_rows: int,
    max_width: int,
    fmt: str,
) -> None:
    """Run a read-only SQL STATEMENT (or --file PATH, or stdin) over the warehouse views.

    Tables: rollouts, attempts, spans, llm_calls, rewards, messages, dataset_rows,
    collections, datasets, runs, run_metrics, rollout_rewards. One call is one
    (rollout_id, attempt_id, sequence_id): join llm_calls and messages on it; a
    dataset row reaches its messages through llm_calls (its span_id). Times are UTC.
    """
    from tracebank.cli.sql_input import parse_params, read_statement
    from tracebank.warehouse.query import run_sql

    table = run_sql(wh, read_statement(statement, file), parse_params(params))
    echo_rows(table, fmt, Limits(max_rows=max_rows, max_width=max_width))


COMMANDS = [sql]
