"""`tracebank rescore`: new rewards for archived rollouts, as a versioned reward layer."""

from __future__ import annotations

from typing import Any

import click

from tracebank.cli.options import config_option, pass_warehouse
from tracebank.cli.output import say
from tracebank.cli.progress import Progress
from tracebank.rescore.config import JudgeConfig, RescoreConfig


@click.command()
@config_option(RescoreConfig, "scorer", metavar="MODULE:FUNCTION", default=None)
@config_option(RescoreConfig, "name", required=True, metavar="NAME", default=None)
@config_option(RescoreConfig, "collections", "--collection", multiple=True, metavar="ID", default=())
@config_option(RescoreConfig, "workers")
@config_option(RescoreConfig, "force")
@config_option(JudgeConfig, "judge", metavar="MODEL")
@config_option(JudgeConfig, "rubric", metavar="FILE")
@config_option(JudgeConfig, "scale", metavar="LO-HI")
@config_option(JudgeConfig, "samples", metavar="N")
@config_option(JudgeConfig, "temperature")
@config_option(JudgeConfig, "seed")
@config_option(JudgeConfig, "group")
@config_option(JudgeConfig, "judge_url", metavar="URL")
@config_option(JudgeConfig, "judge_timeout_s", metavar="SECONDS")
@click.option("--quiet", is_flag=True, help="No progress on stderr; only the summary line.")
@pass_warehouse
def rescore(wh: Any, quiet: bool, collections: tuple[str, ...], **options: Any) -> None:
    """Score every archived rollout with a function of yours, without running the agents again.

    The function gets a tracebank.rescore.ScoredRollout (task, messages, final response, the
    collected reward) and returns a float or None; `transform --rewards NAME` then selects with
    the scores. The same scorer source over the same collections writes nothing.

    Or an LLM judge: --judge MODEL --rubric FILE scores each rollout by the probability-weighted
    mean of the scale's tokens after the rubric (G-Eval); the same judge, rubric, settings and
    collections write nothing.
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
