"""Preference pairs in `show` (two columns: chosen | rejected) and in the report (side by side, with
the distribution of reward margins)."""

from __future__ import annotations

import html
import itertools
import textwrap
from typing import Any

import duckdb
from tracebank.view.conversation import Message, VersionRows
from tracebank.view.errors import NothingToShowError
from tracebank.view.preference_export import Pair, iter_pairs
from tracebank.view.text import message_lines

#: Width of each column of `show`'s side-by-side pair.
COLUMN = 58


def is_preference(rows: VersionRows) -> bool:
    return (rows.manifest.get("params") or {}).get("kind") == "preference"


def _trajectory(rows: VersionRows) -> bool:
    return rows.manifest["params"]["preference"]["unit"] == "trajectory"


def pair_at(con: duckdb.DuckDBPyConnection, rows: VersionRows, index: int) -> Pair:
    """Pair ``index`` of a preference version (in stored order)."""
    found = next(
        itertools.islice(iter_pairs(con, rows.name, rows.version, _trajectory(rows)), index, None), False
    )
    if found is False:
        n = int(rows.manifest.get("rows") or 0)
        raise NothingToShowError(f"{rows.ref} has {n} pairs; no pair {index}", f"use --row 0..{n - 1}")
    if found is None:
        raise NothingToShowError(f"pair {index} of {rows.ref} has no recorded messages")
    return found


def _column(title: str, messages: list[Message], max_chars: int) -> list[str]:
    lines = [title, "-" * COLUMN]
    for message in messages:
        for line in message_lines(message, max_chars):
            lines += textwrap.wrap(line, COLUMN, subsequent_indent="    ") or [""]
    return lines


def pair_text(rows: VersionRows, index: int, pair: Pair, max_chars: int) -> str:
    """The prompt, then chosen and rejected side by side with both rewards."""
    head = [
        f"{rows.ref} pair {index} · task {pair.task} · margin {pair.chosen_reward - pair.rejected_reward:g}",
        "prompt:",
        *(line for m in pair.prompt for line in message_lines(m, max_chars)),
        "",
    ]
    left = _column(
        f"chosen (reward {pair.chosen_reward:g}, {pair.chosen_rollout_id})", pair.chosen, max_chars
    )
    right = _column(
        f"rejected (reward {pair.rejected_reward:g}, {pair.rejected_rollout_id})", pair.rejected, max_chars
    )
    body = [f"{a:<{COLUMN}} | {b}".rstrip() for a, b in itertools.zip_longest(left, right, fillvalue="")]
    return "\n".join(head + body)


def preference_section(con: duckdb.DuckDBPyConnection, rows: VersionRows, n_pairs: int) -> dict[str, Any]:
    """A report section's data: every margin, and the pairs of largest margin (up to ``n_pairs``)."""
    margins = [
        r[0]
        for r in con.execute(
            "SELECT chosen_reward - rejected_reward FROM preference_rows WHERE dataset = ? AND version = ?",
            [rows.name, rows.version],
        ).fetchall()
    ]
    pairs = [p for p in iter_pairs(con, rows.name, rows.version, _trajectory(rows)) if p is not None]
    pairs.sort(key=lambda p: -(p.chosen_reward - p.rejected_reward))
    counts = rows.manifest.get("counts") or {}
    return {
        "kind": "preference",
        "margins": margins,
        "drops": {k: int(counts.get(k) or 0) for k in ("ties", "below_margin", "over_per_task")}
        | {"single-rollout tasks": int(counts.get("singletons") or 0)}
        | {"differing prompts": int(counts.get("differing_prompts") or 0)},
        "pairs": [_pair_json(p) for p in pairs[:n_pairs]],
    }


def _pair_json(pair: Pair) -> dict[str, Any]:
    return {
        "task": pair.task,
        "prompt": [m.openai() for m in pair.prompt],
        "chosen": [m.openai() for m in pair.chosen],
        "rejected": [m.openai() for m in pair.rejected],
        "chosen_reward": pair.chosen_reward,
        "rejected_reward": pair.rejected_reward,
        "chosen_rollout_id": pair.chosen_rollout_id,
        "rejected_rollout_id": pair.rejected_rollout_id,
    }


def _messages_html(messages: list[dict[str, Any]]) -> str:
    return "".join(
        f'<div class="msg role-{html.escape(m["role"])}"><span class="role">{html.escape(m["role"])}</span>'
        f"{html.escape(m.get('content') or '')}</div>"
        for m in messages
    )


def pairs_html(section: dict[str, Any]) -> str:
    """The section's pairs: the prompt, then chosen and rejected side by side with their rewards."""
    parts = []
    for n, p in enumerate(section["pairs"]):
        margin = p["chosen_reward"] - p["rejected_reward"]
        summary = html.escape(f"{section['ref']} pair · task {p['task']} · margin {margin:g}")
        parts.append(
            f'<details class="pair"{" open" if n == 0 else ""}><summary>{summary}</summary>'
            f'{_messages_html(p["prompt"])}<div class="sides">'
            f'<div class="side chosen"><p class="meta">chosen · reward {p["chosen_reward"]:g} · '
            f"{html.escape(p['chosen_rollout_id'])}</p>{_messages_html(p['chosen'])}</div>"
            f'<div class="side rejected"><p class="meta">rejected · reward {p["rejected_reward"]:g} · '
            f"{html.escape(p['rejected_rollout_id'])}</p>{_messages_html(p['rejected'])}</div></div></details>"
        )
    return "".join(parts)
