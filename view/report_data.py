"""Everything `report` plots, gathered from the warehouse views into plain JSON-able data."""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
from tracebank.view.config import ReportConfig
from tracebank.view.conversation import DatasetRow, iter_rows, version_rows
from tracebank.view.errors import NothingToShowError
from tracebank.view.preference_view import is_preference, preference_section
from tracebank.view.report_judges import judge_sections
from tracebank.warehouse import catalog
from tracebank.warehouse.catalog import DatasetRef
from tracebank.warehouse.contract import IGNORE_INDEX, RAW_LLM_SPAN
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.storage import Storage

#: Manifest counts that say why a call or row did not become a training row.
DROP_KEYS = (
    "duplicate_calls",
    "unrewarded",
    "below_min_reward",
    "dropped_too_long",
    "dedup",
    "per_task_dropped",
    "not_selected",
)
ROLLOUT_LINKS = 200

#: Each collection's usable calls, one row per call (its raw_gen_ai_request span when both call
#: spans carry ids).
USABLE_CALLS = f"""
WITH c AS (
  SELECT * FROM llm_calls WHERE reject_reason IS NULL
  QUALIFY row_number() OVER (
    PARTITION BY collection_id, rollout_id, attempt_id, sequence_id
    ORDER BY span_name <> '{RAW_LLM_SPAN}', start_time) = 1
)
"""
#: Prompt and response lengths of each collection's usable calls.
USABLE_CALLS_SQL = (
    USABLE_CALLS
    + """SELECT collection_id, count(*) AS calls,
       list(prompt_len ORDER BY rollout_id, sequence_id) AS prompt_len,
       list(response_len ORDER BY rollout_id, sequence_id) AS response_len
FROM c GROUP BY collection_id
"""
)
#: Usable calls per agent of each collection (a call with no agent has a null one), most first.
AGENT_CALLS_SQL = (
    USABLE_CALLS
    + "SELECT collection_id, agent, count(*) AS calls FROM c GROUP BY ALL "
    + "ORDER BY collection_id, calls DESC, agent NULLS LAST"
)


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
    rel = con.execute(sql, params or [])
    names = [d[0] for d in rel.description]
    return [dict(zip(names, r, strict=True)) for r in rel.fetchall()]


def _versions(wh: Warehouse, wanted: tuple[str, ...]) -> list[tuple[Path, dict[str, Any]]]:
    """The covered versions' manifests in their JSON form (every version when none are named)."""
    if not wanted:
        return [(folder, m.to_json()) for folder, m in Storage(wh).dataset_versions()]
    out = []
    for ref in wanted:
        _, folder, manifest = catalog.resolve_dataset(wh, DatasetRef.parse(ref))
        out.append((folder, manifest.to_json()))
    return out


def drop_reasons(manifest: dict[str, Any]) -> dict[str, int]:
    """Why calls and rows were left out of a version (rejected calls by reason, then the filters)."""
    counts = manifest.get("counts") or {}
    out = {f"rejected: {k}": int(v) for k, v in (counts.get("rejected") or {}).items()}
    out.update({k: int(counts.get(k) or 0) for k in DROP_KEYS if k in counts})
    return out


def unmerged_calls(manifest: dict[str, Any]) -> dict[str, int]:
    """A merged version's calls that could not be merged, per reason (table merge_diagnostics)."""
    counts = manifest.get("counts") or {}
    found = (counts.get("merged") or {}).get("diagnostics") or counts.get("merge_diagnostics") or {}
    return {str(k): int(v) for k, v in found.items() if k != "rollouts" and isinstance(v, int) and v}


def _token_view(row: DatasetRow, tokenizer: Any | None) -> list[list[Any]]:
    """[[text, trained], ...] runs of the row (token by token with a tokenizer, else none)."""
    if tokenizer is None:
        return []
    pieces = [tokenizer.decode([t], skip_special_tokens=False) for t in row.input_ids]
    return [[p, lab != IGNORE_INDEX] for p, lab in zip(pieces, row.labels, strict=True)]


def _conversation(row: DatasetRow, tokenizer: Any | None) -> dict[str, Any]:
    call = row.call
    messages = []
    if call is not None:
        messages = [dict(m.openai(), direction="input") for m in call.inputs]
        messages += [dict(m.openai(), direction="output") for m in call.outputs]
    return {
        "anchor": f"row-{row.dataset}-v{row.version}-{row.index}",
        "dataset": f"{row.dataset}@v{row.version}",
        "index": row.index,
        "split": row.split,
        "reward": row.reward,
        "rollout_id": row.rollout_id,
        "attempt_id": row.attempt_id,
        "agent": call.agent if call is not None else None,
        "model": call.model if call is not None else None,
        "tokens": len(row.input_ids),
        "trained": row.trained,
        "messages": messages,
        "token_runs": _token_view(row, tokenizer),
    }


def _sample(rows: Iterator[DatasetRow], n: int) -> tuple[list[float], list[DatasetRow]]:
    """The train rows' rewards, and the best and worst rows by reward (n in all, best first).

    Rows stream past; only the 2n candidates are kept, so memory does not grow with the version.
    """
    rewards: list[float] = []
    best: list[tuple[float, int, int, DatasetRow]] = []  # min-heap of the best
    worst: list[tuple[float, int, int, DatasetRow]] = []  # min-heap of the negated worst
    n_best, n_worst = (n + 1) // 2, n // 2
    for row in rows:
        reward = row.reward if row.reward is not None else float("-inf")
        if row.split == "train" and row.reward is not None:
            rewards.append(row.reward)
        item = (reward, -row.index, row.index, row)
        if n_best:
            (heapq.heappush if len(best) < n_best else heapq.heappushpop)(best, item)
        if n_worst:
            (heapq.heappush if len(worst) < n_worst else heapq.heappushpop)(
                worst, (-reward, row.index, row.index, row)
            )
    top = [r for *_, r in sorted(best, key=lambda t: (-t[0], t[2]))]
    seen = {r.index for r in top}
    bottom = [r for *_, r in sorted(worst, key=lambda t: (t[0], t[2])) if r.index not in seen]
    return rewards, top + bottom


def _dataset_section(
    wh: Warehouse, con: duckdb.DuckDBPyConnection, manifest: dict[str, Any], tokenizer: Any, n_conv: int
) -> dict[str, Any]:
    name, version = manifest["name"], int(manifest["version"])
    rows = version_rows(wh, f"{name}@v{version}")
    preference = is_preference(rows)
    kept, sample = ([], []) if preference else _sample(iter_rows(con, rows), n_conv)
    sources = [s.get("collection_id") for s in manifest.get("sources", [])]
    source_rewards = _rows(
        con,
        "SELECT reward FROM rollout_rewards WHERE reward IS NOT NULL AND list_contains(?, collection_id)",
        [sources],
    )
    return {
        "anchor": f"ds-{name}-v{version}",
        "ref": f"{name}@v{version}",
        "created_at": manifest.get("created_at"),
        "content_hash": manifest.get("content_hash"),
        "rows": int(manifest.get("rows") or 0),
        "params": manifest.get("params", {}),
        "sources": sources,
        "row_rewards": kept,
        "source_rollout_rewards": [r["reward"] for r in source_rewards],
        "cut": min(kept) if kept else None,
        "drops": drop_reasons(manifest),
        "unmerged": unmerged_calls(manifest),
        "conversations": [_conversation(r, tokenizer) for r in sample],
        "kind": "sft",
    } | (preference_section(con, rows, n_conv) if preference else {})


def _collections(con: duckdb.DuckDBPyConnection, wanted: set[str] | None) -> list[dict[str, Any]]:
    cols = _rows(con, "SELECT collection_id, created_at, tag FROM collections ORDER BY collection_id")
    rewards = _rows(
        con,
        "SELECT collection_id, rollout_id, reward FROM rollout_rewards "
        "WHERE reward IS NOT NULL ORDER BY rollout_id",
    )
    calls = _rows(con, USABLE_CALLS_SQL)
    agents = _rows(con, AGENT_CALLS_SQL)
    by_cid = {c["collection_id"]: c for c in calls}
    rollouts = _rows(con, "SELECT collection_id, rollout_id, status FROM rollouts ORDER BY rollout_id")
    out = []
    for c in cols:
        cid = c["collection_id"]
        if wanted is not None and cid not in wanted:
            continue
        r = [x for x in rewards if x["collection_id"] == cid]
        reward_of = {x["rollout_id"]: x["reward"] for x in r}
        ro = [x for x in rollouts if x["collection_id"] == cid]
        stats = by_cid.get(cid, {})
        out.append(
            {
                "anchor": f"col-{cid}",
                "collection_id": cid,
                "created_at": c.get("created_at"),
                "tag": c.get("tag"),
                "rollout_rewards": [x["reward"] for x in r],
                "prompt_len": stats.get("prompt_len") or [],
                "response_len": stats.get("response_len") or [],
                "calls": stats.get("calls") or 0,
                "agents": [[a["agent"], a["calls"]] for a in agents if a["collection_id"] == cid],
                "rollouts": len(ro),
                "rollout_links": [
                    {
                        "rollout_id": x["rollout_id"],
                        "status": x["status"],
                        "reward": reward_of.get(x["rollout_id"]),
                    }
                    for x in ro[:ROLLOUT_LINKS]
                ],
            }
        )
    return out


def _runs(con: duckdb.DuckDBPyConnection, wanted: set[str] | None) -> list[dict[str, Any]]:
    runs = _rows(
        con,
        "SELECT run_id, status, dataset, base_model, output_dir, started_at FROM runs ORDER BY started_at",
    )
    metrics = _rows(
        con,
        "SELECT run_id, split, list(step ORDER BY step) AS step, list(loss ORDER BY step) AS loss, "
        "list(rewards_margin ORDER BY step) AS margin, list(rewards_accuracy ORDER BY step) AS accuracy "
        "FROM run_metrics WHERE loss IS NOT NULL GROUP BY run_id, split ORDER BY run_id, split",
    )
    out = []
    for r in runs:
        if wanted is not None and r["run_id"] not in wanted:
            continue
        r["anchor"] = f"run-{r['run_id']}"
        r["dataset_anchor"] = "ds-" + str(r["dataset"]).replace("@", "-") if r.get("dataset") else None
        r["curves"] = [
            {
                "split": m["split"],
                "step": m["step"],
                "loss": m["loss"],
                # DPO runs: the reward margin and accuracy of each log (null for SFT)
                **({"margin": m["margin"], "accuracy": m["accuracy"]} if any(m["margin"]) else {}),
            }
            for m in metrics
            if m["run_id"] == r["run_id"]
        ]
        out.append(r)
    return out


def default_tokenizer_dir(runs: list[dict[str, Any]]) -> str | None:
    """A covered run's base model folder, when it is on this machine."""
    for r in runs:
        base = r.get("base_model")
        if base and Path(base, "tokenizer_config.json").exists():
            return str(base)
    return None


def gather(
    wh: Warehouse, con: duckdb.DuckDBPyConnection, config: ReportConfig, tokenizer_loader: Any
) -> dict[str, Any]:
    """The report's data: collections, dataset versions (with sampled conversations), runs and
    the LLM judge layers of those collections."""
    versions = _versions(wh, config.datasets)
    runs = _runs(con, set(config.runs) if config.runs else None)
    if config.datasets and not config.runs:
        refs = {f"{m['name']}@v{m['version']}" for _, m in versions}
        runs = [r for r in runs if r.get("dataset") in refs]
    wanted_cols: set[str] | None = set(config.collections) if config.collections else None
    if wanted_cols is None and config.datasets:
        wanted_cols = {s.get("collection_id") for _, m in versions for s in m.get("sources", [])}
    tok_dir = config.tokenizer or default_tokenizer_dir(runs)
    tokenizer = tokenizer_loader(tok_dir) if tok_dir else None
    data = {
        "warehouse": str(wh.root),
        "tokenizer": tok_dir,
        "collections": _collections(con, wanted_cols),
        "datasets": [_dataset_section(wh, con, m, tokenizer, config.conversations) for _, m in versions],
        "runs": runs,
        "judges": judge_sections(wh, wanted_cols),
    }
    if not (data["collections"] or data["datasets"] or data["runs"]):
        raise NothingToShowError(
            f"nothing to report in {wh.root}", "collect, transform or train something first"
        )
    # Fail here, not halfway through writing, if something is not JSON-able; a NaN or an infinity
    # (a planted reward, a diverged loss) becomes null where the page's JSON is written (script_json).
    json.dumps(data, default=str)
    return data
