"""`tracebank rescore`: new rewards for archived rollouts, as a versioned reward layer."""

from __future__ import annotations

from typing import Any

import click

from tracebank.cli.options import config_option, pass_warehouse
from tracebank.cli.output import say
from tracebank.cli.progress import Progress
from tracebank.rescore.config import RescoreConfig


@click.command()
@config_option(RescoreConfig, "scorer", required=True, metavar="MODULE:FUNCTION")
@config_option(RescoreConfig, "name", required=True, metavar="NAME")
@config_option(RescoreConfig, "collections", "--collection", multiple=True, metavar="ID", default=())
@config_option(RescoreConfig, "workers")
@config_option(RescoreConfig, "force")
@click.option("--quiet", is_flag=True, help="No progress on stderr; only the summary line.")
@pass_warehouse
def rescore(wh: Any, quiet: bool, collections: tuple[str, ...], **options: Any) -> None:
    """Score every archived rollout with a function of yours, without running the agents again.

    The function gets a tracebank.rescore.ScoredRollout (task, messages, final response, the
    collected reward) and returns a float or None; `transform --rewards NAME` then selects with
    the scores. The same scorer source over the same collections writes nothing.
    """
    from tracebank.collect import build_silver
    from tracebank.rescore import rescore as run_rescore

    config = RescoreConfig(collections=tuple(collections), **options).validate()
    wh.check_format()
    from tracebank.warehouse.storage import Storage

    committed = tuple(folder.name for folder, _ in Storage(wh).collections())
    build_silver(wh, config.collections or committed)  # a missing or stale cache is built first
    progress = Progress()
    try:
        result = run_rescore(wh, config, on_event=None if quiet else progress)
    finally:
        progress.close()
    say(result.summary())


COMMANDS = [rescore]
