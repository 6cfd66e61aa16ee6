"""The report page: one HTML file with plotly.js, the data and the page script inlined.

Nothing is fetched when the file is opened (it works offline and from an archive):
plotly's own bundled ``plotly.min.js`` is copied into the page; charts are plotly
figures built in the page from the embedded JSON; conversations are plain HTML.
"""

from __future__ import annotations

import html
import json
from importlib.resources import files
from typing import Any

from tracebank.view.preference_view import pairs_html
from tracebank.warehouse import finite


def _asset(name: str) -> str:
    return files("tracebank.view").joinpath("assets", name).read_text(encoding="utf-8")


def _round(value: Any) -> Any:
    return round(value, 4) if isinstance(value, float) else value


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _link(anchor: str | None, text: Any) -> str:
    return f'<a href="#{_e(anchor)}">{_e(text)}</a>' if anchor else _e(text)


def _runs_html(runs: list[dict[str, Any]]) -> str:
    if not runs:
        return "<p>No runs.</p>"
    rows = [
        [
            f'<span id="{_e(r["anchor"])}">{_e(r["run_id"])}</span>',
            _e(r["status"]),
            _link(r.get("dataset_anchor"), r.get("dataset")),
            _e(r.get("base_model")),
            _e(r.get("output_dir")),
        ]
        for r in runs
    ]
    return _table(["run", "status", "dataset", "base model", "output"], rows)


def _unmerged_html(unmerged: dict[str, int]) -> str:
    if not unmerged:
        return ""
    reasons = ", ".join(f"{_e(k)} {v:,}" for k, v in unmerged.items())
    return f'<p class="meta">calls not merged: {reasons} (sql: <code>merge_diagnostics</code>)</p>'


def _datasets_html(datasets: list[dict[str, Any]]) -> str:
    if not datasets:
        return "<p>No dataset versions.</p>"
    parts = []
    for i, d in enumerate(datasets):
        sources = ", ".join(_link(f"col-{s}", s) for s in d["sources"])
        parts.append(
            f'<h3 id="{_e(d["anchor"])}">{_e(d["ref"])}</h3>'
            f'<p class="meta">{d["rows"]:,} rows · hash <code>{_e((d["content_hash"] or "")[:12])}</code> · '
            f"created {_e(d['created_at'])} · from collections {sources or 'none'} · "
            f"options <code>{_e(json.dumps(d['params'], sort_keys=True))}</code></p>"
            + _unmerged_html(d.get("unmerged") or {})
            + (
                f'<div class="chart" id="chart-margin-{i}"></div>'
                if d.get("kind") == "preference"
                else f'<div class="chart" id="chart-cut-{i}"></div>'
            )
        )
    return "".join(parts)


def _agents_html(agents: list[list[Any]]) -> str:
    """Usable calls per agent (record text, escaped); nothing when no call names an agent."""
    if not any(name is not None for name, _ in agents):
        return ""
    rows = [[_e(name) if name is not None else "<i>none</i>", f"{n:,}"] for name, n in agents]
    return '<div class="agents">' + _table(["agent", "usable calls"], rows) + "</div>"


def _collections_html(collections: list[dict[str, Any]], shown_rollouts: set[str]) -> str:
    if not collections:
        return "<p>No collections.</p>"
    parts = []
    for c in collections:
        links = ", ".join(
            (
                _link(f"ro-{r['rollout_id']}", r["rollout_id"])
                if r["rollout_id"] in shown_rollouts
                else _e(r["rollout_id"])
            )
            + f" ({_e(r['status'])}, reward {_e(_round(r['reward']))})"
            for r in c["rollout_links"]
        )
        more = c["rollouts"] - len(c["rollout_links"])
        meta = f"{c['rollouts']:,} rollouts · {c['calls']:,} usable calls · tag {_e(c['tag'])}"
        tail = f" … and {more:,} more" if more > 0 else ""
        parts.append(
            f'<h3 id="{_e(c["anchor"])}">{_e(c["collection_id"])}</h3><p class="meta">{meta}</p>'
            + _agents_html(c.get("agents") or [])
            + f"<details><summary>rollouts</summary><p>{links}{tail}</p></details>"
        )
    return "".join(parts)


def _message_html(m: dict[str, Any]) -> str:
    weight = m.get("weight")
    label = m["role"] + (f" [{m['tool_call_id']}]" if m.get("tool_call_id") else "")
    calls = "".join(
        '<div class="toolcall">→ tool call '
        f"<code>{_e(c['function']['name'])}({_e(c['function']['arguments'])})</code></div>"
        for c in m.get("tool_calls") or []
    )
    trained = " (trained)" if m.get("direction") == "output" else ""
    return (
        f'<div class="msg role-{_e(m["role"])}{" weight0" if weight == 0 else ""}">'
        f'<span class="role">{_e(label)}{trained}</span>{_e(m.get("content"))}{calls}</div>'
    )


def _tokens_html(runs: list[list[Any]]) -> str:
    if not runs:
        return '<p class="meta">No tokenizer given: pass --tokenizer to see which tokens are trained.</p>'
    spans = "".join(f'<span class="tok {"trained" if t else "masked"}">{_e(text)}</span>' for text, t in runs)
    legend = '<span class="tok trained">trained</span><span class="tok masked">masked (-100)</span>'
    return f'<p class="legend">{legend}</p><div class="tokens">{spans}</div>'


def _conversations_html(datasets: list[dict[str, Any]]) -> tuple[str, set[str]]:
    parts, shown = [], set()
    for d in datasets:
        for n, c in enumerate(d["conversations"]):
            anchor_ro = "" if c["rollout_id"] in shown else f'<span id="ro-{_e(c["rollout_id"])}"></span>'
            shown.add(c["rollout_id"])
            summary = (
                f"{_link(d['anchor'], c['dataset'])} row {c['index']} ({_e(c['split'])}) · "
                f"reward {_e(_round(c['reward']))} · rollout {_e(c['rollout_id'])} · "
                + (f"agent {_e(c['agent'])} · " if c.get("agent") is not None else "")
                + f"{c['tokens']} tokens, {c['trained']} trained"
            )
            opened = " open" if n == 0 else ""
            parts.append(
                f'<details class="conversation" id="{_e(c["anchor"])}"{opened}>{anchor_ro}'
                f"<summary>{summary}</summary>"
                + "".join(_message_html(m) for m in c["messages"])
                + _tokens_html(c["token_runs"])
                + "</details>"
            )
    return ("".join(parts) or "<p>No dataset rows.</p>"), shown


def _judges_html(judges: list[dict[str, Any]]) -> str:
    if not judges:
        return "<p>No LLM judge layers (<code>tracebank rescore --judge</code>).</p>"
    parts = []
    for i, j in enumerate(judges):
        settings = " · ".join(f"{_e(k)} <code>{_e(v)}</code>" for k, v in j["settings"].items())
        counts = (
            f"{j['scored']:,} rollouts scored, {len(j['points']):,} of them with a collected reward "
            f"({j['no_reward']:,} without), {j['unscored']:,} left unscored"
        )
        parts.append(
            f'<h3 id="{_e(j["anchor"])}">{_e(j["ref"])}</h3><p class="meta">{counts}</p>'
            f'<p class="meta">{settings}</p>'
            f'<div class="chart" id="chart-judge-{i}"></div><div class="chart" id="chart-spread-{i}"></div>'
        )
    return "".join(parts)


# Inside a <script> element the HTML parser still reacts to "<!--", "<script" and "</script" (a
# "<!--<script>" in a message would make the page's own closing tag part of the data and swallow
# the page script). JSON has no "<", ">" or "&" outside strings, and in a string the \\u escape
# means the same character, so escaping all three keeps the data exact.
_SCRIPT_SAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


def script_json(data: Any) -> str:
    """``data`` as standard JSON (a non-finite number as null) that can sit inside a ``<script>``
    element whatever its strings hold."""
    return finite.dumps(finite.nulled(data), default=str).translate(_SCRIPT_SAFE)


def page(data: dict[str, Any], plotly_js: str) -> str:
    """The whole report page."""
    conversations, shown = _conversations_html(data["datasets"])
    pairs = "".join(pairs_html(d) for d in data["datasets"] if d.get("kind") == "preference")
    payload = script_json(data)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>tracebank report</title>
<style>{_asset("report.css")}</style><script>{plotly_js}</script></head>
<body>
<h1>tracebank report</h1>
<p class="meta">warehouse {_e(data["warehouse"])} · tokenizer {_e(data["tokenizer"] or "none")}</p>
<h2 id="runs">Runs</h2>{_runs_html(data["runs"])}
<div class="chart" id="chart-loss"></div><div class="chart" id="chart-dpo"></div>
<h2 id="datasets">Dataset versions</h2>{_datasets_html(data["datasets"])}
<div class="chart" id="chart-drops"></div>
<h2 id="collections">Collections</h2>
<div class="chart" id="chart-rewards"></div><div class="chart" id="chart-lengths"></div>
<div class="chart" id="chart-tokens"></div>
{_collections_html(data["collections"], shown)}
<h2 id="judges">LLM judges</h2>
<p class="meta">Each judge layer's score (latest version) against the rollout's collected final reward;
error bars and the histogram show the judge's spread (standard deviation over its samples).</p>
{_judges_html(data.get("judges") or [])}
<h2 id="conversations">Conversations</h2>
<p class="meta">The best and worst rows of each version by reward;
assistant turns the version does not train are faded.</p>
{conversations}
<h2 id="pairs">Preference pairs</h2>
<p class="meta">The pairs of largest reward margin of each preference version:
chosen left, rejected right.</p>
{pairs or "<p>No preference versions.</p>"}
<script type="application/json" id="report-data">{payload}</script>
<script>{_asset("report.js")}</script>
</body></html>
"""
