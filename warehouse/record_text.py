"""Records as text a person reads: what `tracebank datasets show` and `datasets list` print.

Kept next to the records (``DatasetManifest.summary_lines`` delegates here) so that every front
end (the CLI, the API, a notebook) shows a manifest the same way. It works on a manifest's JSON
form, so a version written by an older tracebank (keys missing) still reads.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any


def short_hash(content_hash: str) -> str:
    """The table format's hash: 8 characters, enough to tell versions apart by eye."""
    return content_hash[:8]


def created_text(value: str | None) -> str:
    """An ISO commit time as ``YYYY-MM-DD HH:MM`` (a value that is not one, as it is)."""
    if not value:
        return ""
    try:
        return dt.datetime.fromisoformat(value).strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return value


def _fmt(value: Any) -> str:
    """A manifest value: 4 significant digits, thousands separated, JSON for nested values."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return str(value)


def _preference_lines(m: dict[str, Any]) -> list[str]:
    """What a preference version holds and left out."""
    st, c = m.get("stats", {}), m.get("counts", {})
    margin = c.get("margin") or {}
    lines = [
        f"pairs        {_fmt(m.get('rows', 0))} from {_fmt(c.get('groups', 0))} groups of "
        f"{_fmt(c.get('rollouts', 0))} rollouts in {_fmt(c.get('tasks', 0))} tasks",
        f"left out     ties {_fmt(c.get('ties', 0))}, below margin {_fmt(c.get('below_margin', 0))}, "
        f"over per task {_fmt(c.get('over_per_task', 0))}, "
        f"single-rollout tasks {_fmt(c.get('singletons', 0))}, "
        f"differing prompts {_fmt(c.get('differing_prompts', 0))}",
        f"margin       min {_fmt(margin.get('min'))}  mean {_fmt(margin.get('mean'))}  "
        f"max {_fmt(margin.get('max'))}",
        f"tokens       {_fmt(st.get('tokens', 0))}, longest pair {_fmt(st.get('max_length', 0))}, "
        f"max token id {_fmt(st.get('max_token_id'))}",
    ]
    if c.get("reward_layer"):
        layer = c["reward_layer"]
        lines.append(
            f"rewards      layer {layer['ref']} ({layer['scorer']}, "
            f"source {str(layer['source_hash'])[:12]}), "
            f"{_fmt(c.get('unscored_rollouts', 0))} rollouts unscored"
        )
    return lines


def _sft_lines(m: dict[str, Any]) -> list[str]:
    """What an SFT version holds and left out."""
    st, c = m.get("stats", {}), m.get("counts", {})
    reward = st.get("reward") or {}
    lengths = st.get("lengths") or {}
    lines = [
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
    diagnostics = (c.get("merged") or {}).get("diagnostics") or c.get("merge_diagnostics")
    if diagnostics:
        lines.append(_unmerged_line(diagnostics))
    return lines


def _unmerged_line(counts: dict[str, Any]) -> str:
    """Calls that could not be merged, per reason (table merge_diagnostics)."""
    reasons = ", ".join(f"{k} {_fmt(v)}" for k, v in counts.items() if k != "rollouts")
    return f"unmerged     {reasons} in {_fmt(counts.get('rollouts', 0))} rollouts (sql: merge_diagnostics)"


def dataset_summary_lines(ref: Any, folder: Any, m: dict[str, Any]) -> list[str]:
    """The manifest essentials of one version (its JSON form ``m``), readable: one line each."""
    preference = (m.get("params") or {}).get("kind") == "preference"
    params = {
        k: v
        for k, v in (m.get("params") or {}).items()
        if v is not None and v is not False and v != [] and k != "name"
    }
    lines = [
        f"{ref}  ({folder})",
        f"created      {created_text(m.get('created_at'))}  tracebank {m.get('tracebank_version', '?')}",
        f"hash         {m.get('content_hash', '')}",
        *(_preference_lines(m) if preference else _sft_lines(m)),
    ]
    lines.append("params       " + "  ".join(f"{k}={_fmt(v)}" for k, v in sorted(params.items())))
    for s in m.get("sources", []):
        lines.append(f"source       {s['collection_id']}  {str(s.get('content_hash', ''))[:12]}")
    for f in m.get("files", []):
        lines.append(
            f"file         {f['path']}  {f.get('split', '')}  {_fmt(f.get('rows', 0))} rows  "
            f"{_fmt(f.get('bytes', 0))} bytes  sha256 {str(f.get('sha256', ''))[:12]}"
        )
    return lines
