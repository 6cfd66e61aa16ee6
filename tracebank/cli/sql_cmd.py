"""`tracebank sql`: read-only SQL over the warehouse views."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

import click

from tracebank.cli.options import config_option, format_option, pass_warehouse
from tracebank.cli.output import echo_rows
from tracebank.cli.readable import Limits

T = TypeVar("T")


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

    sql_text, values = read_statement(statement, file), parse_params(params)
    table = _interruptible(lambda: wh.sql(sql_text, values).result_rows())
    echo_rows(table, fmt, Limits(max_rows=max_rows, max_width=max_width))


def _interruptible(query: Callable[[], T]) -> T:
    """``query()`` in a worker thread while this (the main) thread waits, so Ctrl-C and SIGTERM
    end `sql` at once: DuckDB looks for signals only now and then inside a query, and a long
    one could otherwise run on. On an interrupt the query is left to die with the process
    (it only reads), which the CLI then ends without waiting for it."""
    done: dict[str, Any] = {}

    def work() -> None:
        try:
            done["table"] = query()
        except BaseException as exc:  # handed to the main thread as it is
            done["error"] = exc

    worker = threading.Thread(target=work, name="tracebank-sql", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.05)
    except KeyboardInterrupt:
        click.get_current_context().meta["tracebank.exit_at_once"] = True
        raise
    if "error" in done:
        raise done["error"]
    return done["table"]


COMMANDS = [sql]
