"""`tracebank gc`: remove what crashed or killed writers left behind."""

from __future__ import annotations

from typing import Any

import click

from tracebank.cli.options import pass_warehouse
from tracebank.cli.output import say
from tracebank.warehouse.layout import DEFAULT_MIN_AGE_S


@click.command()
@click.option(
    "--min-age",
    "min_age_s",
    type=click.FloatRange(min=0),
    default=DEFAULT_MIN_AGE_S,
    show_default=True,
    metavar="S",
    help="Leave temp files, uncommitted folders and run leftovers younger than S seconds (a writer "
    "may own them).",
)
@click.option("--dry-run", is_flag=True, help="Only say what would be removed.")
@pass_warehouse
def gc(wh: Any, min_age_s: float, dry_run: bool) -> None:
    """Remove scratch, half-saved staging models and temp files of runs and writers that ended
    without cleaning up; mark runs whose process is gone as failed. Committed data and finished
    models are never touched; beside a model folder, only what a run marked as its own is removed.
    Refuses a warehouse whose top-level folders are symlinks."""
    report = wh.gc(min_age_s=min_age_s, dry_run=dry_run)
    for run_id in report.runs_failed:
        say(f"run {run_id}: failed (process gone)")
    for path, size in report.removed:
        say(f"{'would remove' if dry_run else 'removed'} {path} ({size:,} bytes)")
    say(report.summary(dry_run))


COMMANDS = [gc]
