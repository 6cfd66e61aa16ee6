"""`tracebank collect`, `tracebank rebuild-silver`, `tracebank repair-duplicates`: each parses its
flags, makes one call on the Warehouse and prints what it did."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from tracebank.cli.options import config_option, pass_warehouse
from tracebank.cli.output import say
from tracebank.cli.progress import Progress
from tracebank.collect.config import VERSIONS, CollectConfig
from tracebank.collect.formats import FORMATS

MOVED = {
    "rebuild_silver": "`tracebank rebuild-silver [--collection ID]`",
    "repair_duplicates": "`tracebank repair-duplicates`, then collect",
}


def _moved(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """An old flag that is a command of its own now: one line naming it."""
    from tracebank.collect.errors import CollectUsageError

    if value:
        raise CollectUsageError(f"--{param.name.replace('_', '-')} is now {MOVED[param.name]}")  # type: ignore[union-attr]


@click.command()
@click.argument("path", required=False, type=click.Path(path_type=Path))
@click.option(
    "--format",
    type=click.Choice(FORMATS),
    default=None,
    help="The format of PATH's files (default: sniffed from each file's start).",
)
@click.option(
    "--store",
    "store_url",
    default=None,
    metavar="URL",
    help="The server to read: an `agl store` (0.3) or an `agl-server` (1.0), e.g. http://127.0.0.1:4747.",
)
@click.option(
    "--spool",
    default=None,
    metavar="DIR",
    type=click.Path(file_okay=False),
    help="Commit what tracebank's Agent Lightning 1.0 trainer hook spooled into DIR (its TRACEBANK_SPOOL).",
)
@click.option(
    "--source",
    "version",
    type=click.Choice(VERSIONS),
    default="auto",
    show_default=True,
    help="Agent Lightning version of --store; auto asks the server.",
)
@click.option(
    "--agl-key", envvar="AGL_KEY", default="", metavar="KEY", help="API key of an agl-server (or $AGL_KEY)."
)
@config_option(CollectConfig, "statuses", "--status", multiple=True, metavar="S", default=())
@config_option(CollectConfig, "mode", metavar="M")
@config_option(CollectConfig, "rollout_ids", "--rollout-id", multiple=True, metavar="ID", default=())
@click.option(
    "--since",
    default=None,
    metavar="T",
    help="Only rollouts started at or after T (ISO date/time, or epoch seconds).",
)
@config_option(CollectConfig, "attempts", metavar="latest|all")
@config_option(CollectConfig, "tag", metavar="T")
@config_option(CollectConfig, "redact", "--redact/--no-redact", default=True, show_default=False)
@config_option(CollectConfig, "concurrency", metavar="N")
@config_option(CollectConfig, "rows_per_file", metavar="N")
@config_option(CollectConfig, "connect_timeout_s", metavar="S")
@config_option(CollectConfig, "read_timeout_s", metavar="S")
@config_option(CollectConfig, "silver", "--silver/--no-silver", default=True, show_default=False)
@click.option("--rebuild-silver", is_flag=True, hidden=True, expose_value=False, callback=_moved)
@click.option("--repair-duplicates", is_flag=True, hidden=True, expose_value=False, callback=_moved)
@pass_warehouse
def collect(
    wh: Any, path: Path | None, format: str | None, store_url: str | None, spool: str | None, **options: Any
) -> None:
    """Copy new rollouts, attempts and spans from the store at URL into one new collection.

    PATH: a chat file (seed 003's train.jsonl: {"messages": [...], "tools": [...]} per line,
    optional "reward" and "id") or another tool's log (--format chat|openai|otlp|atif), or
    a folder of them; one line per bad record, the rest kept.

    Agent Lightning 1.0: --spool DIR commits what tracebank's trainer hook saved (and
    empties DIR); --store URL of an agl-server reads the rollouts that finished since
    the last run (the trainer may delete some first: use the hook). Without --status
    both succeeded and failed 1.0 rollouts are kept (1.0 trains on both).
    Attempts already in the warehouse are skipped, so rerunning adds only what is new.
    Then the collection's silver tables (llm_calls, rewards, messages) are built, so they
    are queryable at once and `tracebank transform` starts from them.
    """
    from tracebank.collect.errors import CollectUsageError

    given = [x for x in (path, store_url, spool) if x is not None]
    if not given:
        raise click.UsageError("Missing option '--store'. (Or --spool DIR: an Agent Lightning 1.0 spool.)")
    if store_url is not None and spool is not None:
        raise CollectUsageError("give only one of --store URL and --spool DIR")
    if len(given) > 1:
        raise CollectUsageError("give PATH alone (not with --store or --spool)")
    if format is not None and path is None:
        raise CollectUsageError("--format is the format of PATH's files", "give PATH")
    if path is not None:
        options["format"] = format or "auto"
    progress = Progress()
    try:
        result = wh.collect(store_url or path or Path(spool or ""), on_event=progress, **options)
    finally:
        progress.close()
    for warning in result.warnings:
        say(f"Warning: {warning}", err=True)
    for line in result.summary_lines():
        say(line)


@click.command("rebuild-silver")
@click.option(
    "--collection",
    "collections",
    multiple=True,
    metavar="ID",
    help="Only this collection (repeatable; default: every collection).",
)
@pass_warehouse
def rebuild_silver(wh: Any, collections: tuple[str, ...]) -> None:
    """Build the silver tables (llm_calls, rewards, messages) of committed collections
    again."""
    from tracebank.collect import silver_summary

    for manifest in wh.rebuild_silver(collections):
        say(f"silver of {manifest.collection_id}: {silver_summary(manifest)}")


@click.command("repair-duplicates")
@pass_warehouse
def repair_duplicates(wh: Any) -> None:
    """Keep one copy of every attempt that collects running at once stored twice."""
    progress = Progress()
    try:
        repaired = wh.repair_duplicates(on_event=progress)
    finally:
        progress.close()
    for line in repaired.lines():
        say(line)


COMMANDS = [collect, rebuild_silver, repair_duplicates]
