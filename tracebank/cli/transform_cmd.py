"""`tracebank transform` and `tracebank datasets list|show`."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import click


@click.command()
@click.option("--name", required=True, help="Dataset name; writes the next version NAME@vN.")
@click.option(
    "--collection",
    "collections",
    multiple=True,
    metavar="ID",
    help="Collection to read (repeatable). Default: every committed collection.",
)
@click.option(
    "--top-fraction",
    type=float,
    default=1.0,
    show_default=True,
    help="Keep the top max(1, int(n*F)) rows by reward, ties broken by a seeded shuffle "
    "(the recipe's triplet_fraction; the upstream example uses 0.5).",
)
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed of the tie-break shuffle, the final shuffle and the validation split.",
)
@click.option(
    "--min-reward", type=float, default=None, help="Drop rows whose reward is below this before selecting."
)
@click.option(
    "--select-by",
    type=click.Choice(["triplet", "rollout"]),
    default="triplet",
    show_default=True,
    help="Rank single rows (the recipe) or whole rollouts by their final reward.",
)
@click.option(
    "--per-task",
    type=int,
    default=None,
    metavar="K",
    help="Keep only the best K rollouts of each task input (rejection sampling).",
)
@click.option(
    "--val-fraction",
    type=float,
    default=0.0,
    show_default=True,
    help="Fraction of the selected rollouts (never single rows) for validation.parquet.",
)
@click.option(
    "--max-length",
    type=int,
    default=None,
    help="Drop rows longer than this many tokens (counted, never truncated).",
)
@click.option("--dedup", is_flag=True, help="Keep one row of identical input_ids + labels (highest reward).")
@click.option(
    "--merge",
    type=click.Choice(["none", "trajectory"]),
    default="none",
    show_default=True,
    help="trajectory: calls that extend the previous call's prompt + response become one row; "
    "tokens in between are masked with -100.",
)
@click.option("--rebuild-silver", is_flag=True, help="Rebuild the silver tables even if cached.")
@click.pass_obj
def transform(
    wh: Any,
    name: str,
    collections: tuple[str, ...],
    top_fraction: float,
    seed: int,
    min_reward: float | None,
    select_by: str,
    per_task: int | None,
    val_fraction: float,
    max_length: int | None,
    dedup: bool,
    merge: str,
    rebuild_silver: bool,
) -> None:
    """Build the next version of dataset NAME from collected spans.

    With the defaults the rows are exactly those of Agent Lightning's
    LlmProxyTraceToTriplet + the Unsloth SFT recipe's data step.
    """
    from tracebank.transform import TransformConfig
    from tracebank.transform import transform as run

    config = TransformConfig(
        name=name,
        collections=tuple(collections),
        top_fraction=top_fraction,
        seed=seed,
        min_reward=min_reward,
        select_by=select_by,
        per_task=per_task,
        val_fraction=val_fraction,
        max_length=max_length,
        dedup=dedup,
        merge=merge,
        rebuild_silver=rebuild_silver,
    )
    click.echo(run(wh, config).summary())


@click.group()
def datasets() -> None:
    """List dataset versions, or show one."""


def _created(value: str | None) -> str:
    if not value:
        return ""
    try:
        return dt.datetime.fromisoformat(value).strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return value


@datasets.command("list")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "csv", "json"]),
    default="table",
    show_default=True,
    help="Output format.",
)
@click.pass_obj
def list_cmd(wh: Any, fmt: str) -> None:
    """Every committed version: name, version, rows, tokens, created, hash."""
    import pyarrow as pa

    from tracebank.cli.output import render
    from tracebank.warehouse.listings import datasets_table

    rows = [
        {**row, "created": _created(row["created_at"]), "hash": str(row["content_hash"] or "")[:8]}
        for row in datasets_table(wh).to_pylist()
    ]
    schema = pa.schema(
        [
            ("name", pa.string()),
            ("version", pa.string()),
            ("rows", pa.int64()),
            ("tokens", pa.int64()),
            ("created", pa.string()),
            ("hash", pa.string()),
        ]
    )
    click.echo(render(pa.Table.from_pylist(rows, schema=schema), fmt))  # extra keys are dropped


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return str(value)


def show_text(ref: Any, folder: Any, m: dict[str, Any]) -> str:
    """The manifest essentials of one version, readable."""
    st, c = m.get("stats", {}), m.get("counts", {})
    reward = st.get("reward") or {}
    lengths = st.get("lengths") or {}
    params = {
        k: v
        for k, v in (m.get("params") or {}).items()
        if v is not None and v is not False and v != [] and k != "name"
    }
    lines = [
        f"{ref}  ({folder})",
        f"created      {_created(m.get('created_at'))}  tracebank {m.get('tracebank_version', '?')}",
        f"hash         {m.get('content_hash', '')}",
        f"rows         {_fmt(m.get('rows', 0))}  "
        + "  ".join(f"{k} {_fmt(v)}" for k, v in (st.get("rows_by_split") or {}).items() if v),
        f"tokens       {_fmt(st.get('tokens', 0))} ({_fmt(st.get('trained_tokens', 0))} trained), "
        f"longest {_fmt(st.get('max_length', 0))}, max token id {_fmt(st.get('max_token_id'))}",
        "lengths      " + "  ".join(f"{k} {_fmt(v)}" for k, v in lengths.items()),
        f"reward       min {_fmt(reward.get('min'))}  mean {_fmt(reward.get('mean'))}  "
        f"max {_fmt(reward.get('max'))}",
        f"calls        {_fmt(c.get('calls', 0))} usable, {_fmt(c.get('rewarded', 0))} rewarded, "
        f"{_fmt(c.get('unrewarded', 0))} unrewarded, {_fmt(c.get('duplicate_calls', 0))} duplicates",
        "rejected     "
        + (", ".join(f"{k} {v}" for k, v in sorted((c.get("rejected") or {}).items())) or "none"),
        f"dropped      too long {c.get('dropped_too_long', 0)}, below min reward "
        f"{c.get('below_min_reward', 0)}, dedup {c.get('dedup', 0)}, "
        f"per task {c.get('per_task_dropped', 0)}, "
        f"not selected {c.get('not_selected', 0)}",
    ]
    if c.get("merged"):
        mg = c["merged"]
        lines.append(
            f"merged       {_fmt(mg['calls'])} calls into {_fmt(mg['rows'])} rows, "
            f"{_fmt(mg['tokens_saved'])} tokens saved, {mg['prefix_breaks']} prefix breaks"
        )
    lines.append("params       " + "  ".join(f"{k}={_fmt(v)}" for k, v in sorted(params.items())))
    for s in m.get("sources", []):
        lines.append(f"source       {s['collection_id']}  {str(s.get('content_hash', ''))[:12]}")
    for f in m.get("files", []):
        lines.append(
            f"file         {f['path']}  {f.get('split', '')}  {_fmt(f.get('rows', 0))} rows  "
            f"{_fmt(f.get('bytes', 0))} bytes  sha256 {str(f.get('sha256', ''))[:12]}"
        )
    return "\n".join(lines)


@datasets.command("show")
@click.argument("ref", metavar="NAME[@vN]")
@click.option("--json", "as_json", is_flag=True, help="Print the whole manifest as JSON.")
@click.pass_obj
def show_cmd(wh: Any, ref: str, as_json: bool) -> None:
    """The manifest of NAME@vN (latest version when unversioned)."""
    from tracebank.warehouse.catalog import resolve_dataset

    wh.check_format()
    resolved, folder, record = resolve_dataset(wh, ref)
    manifest = record.to_json()
    if as_json:
        click.echo(json.dumps(manifest, indent=2, sort_keys=True))
    else:
        click.echo(show_text(resolved, folder, manifest))


COMMANDS = [transform, datasets]
