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
    progress = Progress()
    scorer, name = options.pop("scorer"), options.pop("name")
    try:
        result = wh.rescore(
            scorer, name=name, collections=collections, on_event=None if quiet else progress, **options
        )
    finally:
        progress.close()
    say(result.summary())


COMMANDS = [rescore]
