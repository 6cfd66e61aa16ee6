"""`tracebank transform` and `tracebank datasets list|show`."""

from __future__ import annotations

import json
from typing import Any

import click

from tracebank.cli.options import (
    config_file_option,
    config_option,
    config_yaml,
    format_option,
    pass_warehouse,
    replay_format_option,
)
from tracebank.cli.output import say
from tracebank.cli.progress import Progress
from tracebank.transform.config import (
    ENGINES,
    KINDS,
    LEVELS,
    MERGE,
    PAIRINGS,
    RULES,
    SELECT_BY,
    UNITS,
    Agl1Limits,
    PreferenceRules,
    TransformConfig,
)


def _dataset_alias(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.meta["tracebank.dataset_alias"] = value


@click.command()
@config_file_option
@config_option(TransformConfig, "name", "--dataset", required=False, metavar="NAME")
@click.option(
    "--name",
    "dataset_alias",
    hidden=True,
    expose_value=False,
    callback=_dataset_alias,
    help="Old name of --dataset.",
)
@config_option(TransformConfig, "collections", "--collection", multiple=True, metavar="ID", default=())
@config_option(TransformConfig, "top_fraction")
@config_option(TransformConfig, "seed")
@config_option(TransformConfig, "min_reward")
@config_option(TransformConfig, "select_by", type=click.Choice(SELECT_BY))
@config_option(TransformConfig, "per_task", metavar="K")
@config_option(TransformConfig, "val_fraction")
@config_option(TransformConfig, "max_length")
@config_option(TransformConfig, "dedup")
@config_option(TransformConfig, "merge", type=click.Choice(MERGE))
@click.option(
    "--rebuild-silver",
    is_flag=True,
    help="Rebuild the silver tables of every chosen collection even if cached.",
)
@config_option(TransformConfig, "force")
@config_option(TransformConfig, "rules", type=click.Choice(RULES))
@config_option(Agl1Limits, "level", "--agl1-level", type=click.Choice(LEVELS))
@config_option(Agl1Limits, "max_prompt_length", "--agl1-max-prompt-length")
@config_option(Agl1Limits, "max_response_length", "--agl1-max-response-length")
@config_option(Agl1Limits, "max_total_length", "--agl1-max-total-length")
@config_option(Agl1Limits, "reward_fillna_value", "--agl1-reward-fillna")
@config_option(TransformConfig, "engine", type=click.Choice(ENGINES))
@config_option(TransformConfig, "address", metavar="HOST:PORT")
@config_option(TransformConfig, "kind", type=click.Choice(KINDS))
@config_option(PreferenceRules, "min_margin")
@config_option(PreferenceRules, "pairs_per_task", metavar="K")
@config_option(PreferenceRules, "pairing", type=click.Choice(PAIRINGS))
@config_option(PreferenceRules, "unit", type=click.Choice(UNITS))
@config_option(TransformConfig, "rewards", metavar="NAME[@vN]")
@config_option(TransformConfig, "agent", metavar="REGEX")
@config_option(TransformConfig, "agent_key", metavar="tag|model|system|tools|MODULE:FUNCTION")
@config_option(TransformConfig, "tokenizer", metavar="MODEL")
@config_option(TransformConfig, "per_turn")
@pass_warehouse
def transform(
    wh: Any,
    name: str | None,
    collections: tuple[str, ...],
    rebuild_silver: bool,
    **options: Any,
) -> None:
    """Build the next version of a dataset (--dataset NAME) from collected spans.

    With the defaults the rows are exactly those of Agent Lightning's
    LlmProxyTraceToTriplet + the Unsloth SFT recipe's data step. The chosen
    collections' silver tables are built first where missing or stale.
    """
    name = name or click.get_current_context().meta.get("tracebank.dataset_alias")
    if not name:
        raise click.UsageError("Missing option '--dataset'.")
    progress = Progress()
    try:
        version = wh.transform(
            name, collections=collections, rebuild_silver=rebuild_silver, on_event=progress, **options
        )
    finally:
        progress.close()
    say(version.summary())


@click.group(invoke_without_command=True)
@click.pass_context
def datasets(ctx: click.Context) -> None:
    """List dataset versions, or show one."""
    if ctx.invoked_subcommand is None:  # a bare group lists, as `git remote` does
        ctx.invoke(list_cmd)


@datasets.command("list")
@format_option
@pass_warehouse
def list_cmd(wh: Any, fmt: str) -> None:
    """Every committed version: name, version, rows, tokens, created, hash."""
    from tracebank.cli.output import echo_rows
    from tracebank.warehouse.query import ResultRows
    from tracebank.warehouse.record_text import created_text, short_hash

    shown = ResultRows(
        ["name", "version", "rows", "tokens", "created", "hash"],
        [
            (
                row["name"],
                row["version"],
                row["rows"],
                row["tokens"],
                created_text(row["created_at"]),
                short_hash(str(row["content_hash"] or "")) if fmt == "table" else row["content_hash"],
            )
            for row in wh.datasets().to_pylist()
        ],
    )
    echo_rows(shown, fmt)


def dataset_config_yaml(ref: Any, record: Any) -> str:
    """A ``transform --config`` file of the options that shaped version ``ref``'s rows
    (`warehouse.replay`: never where or whether to build), its collections pinned to the ones it
    read (a version from before the manifest recorded ``config`` gives its ``params``)."""
    from tracebank.warehouse.replay import defaults_of, replay_transform

    given = record.config if record.config is not None else record.params
    recorded = {k: v for k, v in given.items() if k not in ("agl1", "preference")}
    for group in ("agl1", "preference"):
        if isinstance(given.get(group), dict):
            recorded.update(given[group])
    replay = replay_transform(recorded, defaults_of(TransformConfig, Agl1Limits, PreferenceRules))
    settings = dict(replay.settings)
    if not settings.get("collections"):
        settings["collections"] = sorted(s["collection_id"] for s in record.sources)
    head = (
        f"tracebank transform --config FILE rebuilds {ref} (content hash {record.content_hash});\n"
        "an identical build writes nothing, --force writes it again as a new version"
    )
    dropped = replay.dropped_line()
    return config_yaml(transform, settings, head + (f"\n{dropped}" if dropped else ""))


@datasets.command("show")
@click.argument("ref", metavar="NAME[@vN]")
@replay_format_option("transform")
@click.option("--json", "as_json", is_flag=True, hidden=True, help="Old name of --format json.")
@pass_warehouse
def show_cmd(wh: Any, ref: str, fmt: str, as_json: bool) -> None:
    """The manifest of NAME@vN (latest version when unversioned)."""
    version = wh.dataset(ref)
    if fmt == "yaml" and not as_json:
        click.echo(dataset_config_yaml(version.ref, version.record), nl=False)
    elif as_json or fmt == "json":
        click.echo(json.dumps(version.manifest, indent=2, sort_keys=True))
    else:
        say("\n".join(version.record.summary_lines(version.ref, version.folder)))


COMMANDS = [transform, datasets]
