"""`tracebank collect`: copy new rollouts from an `agl store`, an `agl-server` or a spool into the
warehouse. It parses the flags into a source and a CollectConfig and prints what the one entry,
`tracebank.collect.collect`, did."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from tracebank.cli.options import config_option, pass_warehouse
from tracebank.cli.output import say
from tracebank.collect.config import AGL1_STATUSES, VERSIONS, CollectConfig

if TYPE_CHECKING:
    from tracebank.collect import Source


@contextmanager
def _progress_bar(enabled: bool) -> Iterator[Any]:
    """A rich progress bar on stderr when it is a terminal; otherwise no callback at all."""
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("collecting"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task("collect", total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total or None)

        yield update


@click.command()
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
@config_option(CollectConfig, "statuses", "--status", multiple=True, metavar="S")
@click.option("--mode", default=None, metavar="M", help="Only rollouts of this mode: train, val or test.")
@click.option(
    "--rollout-id", "rollout_ids", multiple=True, metavar="ID", help="Only this rollout (repeatable)."
)
@click.option(
    "--since",
    default=None,
    metavar="T",
    help="Only rollouts started at or after T (ISO date/time, or epoch seconds).",
)
@config_option(CollectConfig, "attempts", metavar="latest|all")
@click.option("--tag", default=None, metavar="T", help="A name for this round, kept in the manifest.")
@click.option("--no-redact", is_flag=True, help="Keep credentials found in span attributes.")
@config_option(CollectConfig, "concurrency", metavar="N")
@config_option(CollectConfig, "rows_per_file", metavar="N")
@config_option(CollectConfig, "connect_timeout_s", metavar="S")
@config_option(CollectConfig, "read_timeout_s", metavar="S")
@click.option(
    "--repair-duplicates",
    is_flag=True,
    help="First keep one copy of every attempt stored twice (by collects that ran at once).",
)
@click.option(
    "--no-silver",
    is_flag=True,
    help="Skip building the llm_calls / rewards / messages tables of the new collection now.",
)
@click.option(
    "--rebuild-silver",
    is_flag=True,
    help="Collect nothing; rebuild the silver tables of the --collection(s) (default: all collections).",
)
@click.option(
    "--collection",
    "collections",
    multiple=True,
    metavar="ID",
    help="With --rebuild-silver: only this collection (repeatable).",
)
@pass_warehouse
def collect(
    wh: Any,
    store_url: str | None,
    spool: str | None,
    version: str,
    agl_key: str,
    statuses: tuple[str, ...],
    mode: str | None,
    rollout_ids: tuple[str, ...],
    since: str | None,
    attempts: str,
    tag: str | None,
    no_redact: bool,
    concurrency: int,
    rows_per_file: int,
    connect_timeout_s: float,
    read_timeout_s: float,
    repair_duplicates: bool,
    no_silver: bool,
    rebuild_silver: bool,
    collections: tuple[str, ...],
) -> None:
    """Copy new rollouts, attempts and spans from the store at URL into one new collection.

    Agent Lightning 1.0: --spool DIR commits what tracebank's trainer hook saved (and
    empties DIR); --store URL of an agl-server reads the rollouts that finished since
    the last run (the trainer may delete some first: use the hook). Without --status
    both succeeded and failed 1.0 rollouts are kept (1.0 trains on both).
    Attempts already in the warehouse are skipped, so rerunning adds only what is new.
    Then the collection's silver tables (llm_calls, rewards, messages) are built, so they
    are queryable at once and `tracebank transform` starts from them. With --rebuild-silver
    nothing is collected: the silver tables of committed collections are built again.
    """
    from tracebank.collect import collect as run_collect
    from tracebank.collect import parse_since, silver_summary
    from tracebank.collect.errors import CollectUsageError

    if rebuild_silver:
        _rebuild(wh, store_url, collections)
        return
    if collections:
        raise CollectUsageError("--collection works only with --rebuild-silver")
    if tag is not None and (not tag.strip() or "\n" in tag or len(tag) > 100):
        raise CollectUsageError(f"invalid --tag {tag!r}", "use one line of at most 100 characters")
    source = _source(store_url, spool, version, agl_key)
    if source.records == "events" and _defaulted("statuses"):
        statuses = AGL1_STATUSES
    config = CollectConfig(
        statuses=tuple(statuses),
        mode=mode,
        rollout_ids=tuple(rollout_ids),
        since=parse_since(since) if since is not None else None,
        attempts=attempts,  # type: ignore[arg-type]  # validated by CollectConfig.validate
        tag=tag,
        redact=not no_redact,
        concurrency=concurrency,
        rows_per_file=rows_per_file,
        silver=not no_silver,
        connect_timeout_s=connect_timeout_s,
        read_timeout_s=read_timeout_s,
    ).validate()
    if repair_duplicates:
        _repair(wh)
    with _progress_bar(sys.stderr.isatty()) as progress:
        result = run_collect(source, wh, config, progress=progress, on_wait=lambda note: say(note, err=True))
    for warning in result.warnings:
        say(f"Warning: {warning}", err=True)
    say(result.summary())
    if result.silver_rebuilt:
        say(f"silver: built the missing caches of {', '.join(result.silver_rebuilt)}")
    if result.silver is not None:
        say(f"silver: {silver_summary(result.silver)}")


def _defaulted(param: str) -> bool:
    """Whether the command's ``param`` was left at its default (not given on the command line)."""
    return click.get_current_context().get_parameter_source(param) is ParameterSource.DEFAULT


def _source(store_url: str | None, spool: str | None, version: str, key: str) -> Source:
    """The source ``--store`` / ``--spool`` name."""
    from tracebank.collect import SpoolSource, server_source
    from tracebank.collect.errors import CollectUsageError

    if store_url is None and spool is None:
        raise click.UsageError("Missing option '--store'. (Or --spool DIR: an Agent Lightning 1.0 spool.)")
    if store_url is not None and spool is not None:
        raise CollectUsageError("give only one of --store URL and --spool DIR")
    if spool is not None:
        return SpoolSource(Path(spool))
    return server_source(store_url or "", key, version)


def _repair(wh: Any) -> None:
    """``--repair-duplicates``: keep one copy of every attempt stored twice, and say what changed."""
    from tracebank.collect.batch import new_collection_id
    from tracebank.collect.repair import repair_duplicates

    repaired = repair_duplicates(wh, new_collection_id, on_wait=lambda note: say(note, err=True))
    for old, new in repaired.replaced:
        say(f"repaired {old}: " + (f"replaced by {new}" if new else "held only duplicates, retired"))
    say(repaired.summary())


def _rebuild(wh: Any, store_url: str | None, collections: tuple[str, ...]) -> None:
    """``--rebuild-silver``: the silver tables of committed collections, built again."""
    from tracebank.collect import build_silver, silver_summary
    from tracebank.collect.errors import CollectUsageError

    if store_url is not None:
        raise CollectUsageError(
            "--rebuild-silver collects nothing, so it takes no --store",
            "run the two commands one after the other",
        )
    for manifest in build_silver(wh, collections, force=True):
        say(f"silver of {manifest.collection_id}: {silver_summary(manifest)}")


COMMANDS = [collect]
