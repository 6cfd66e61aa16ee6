"""The report's judge section: each LLM judge layer's scores against the rollouts' collected rewards.

A judge layer is a reward layer whose manifest names a judge (``rescore --judge``); the report shows
the latest version of each. Layer names, rollout ids and manifest fields are record text: the page
escapes them like every other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.records import RewardLayerManifest
from tracebank.warehouse.storage import Storage

#: Judge settings the report names under each chart (the rest stay in the manifest).
SHOWN_SETTINGS = ("model", "url", "scale", "samples", "temperature", "group", "rubric_sha256")


def latest_judge_layers(storage: Storage) -> list[tuple[Path, RewardLayerManifest]]:
    """The latest version of each reward layer, those an LLM judge scored, by name."""
    latest: dict[str, tuple[Path, RewardLayerManifest]] = {}
    for folder, manifest in storage.reward_layers():
        if manifest.name not in latest or manifest.version > latest[manifest.name][1].version:
            latest[manifest.name] = (folder, manifest)
    return [latest[n] for n in sorted(latest) if latest[n][1].judge]


def _collected(storage: Storage, collections: set[str]) -> dict[tuple[str, str], float]:
    """(rollout, attempt) -> collected final reward, over the collections whose silver is current."""
    out: dict[tuple[str, str], float] = {}
    for cid in sorted(collections):
        if storage.current_silver(cid) is not None:
            out.update(storage.final_rewards(cid))
    return out


def judge_section(storage: Storage, folder: Path, manifest: RewardLayerManifest) -> dict[str, Any]:
    """One judge layer: its (collected reward, score) points with each score's spread over samples."""
    scores = storage.reward_scores(folder, manifest).to_pylist()
    scored = [s for s in scores if s["score"] is not None]
    rewards = _collected(storage, {s["collection_id"] for s in scored})
    points = [
        {
            "rollout_id": s["rollout_id"],
            "reward": rewards[(s["rollout_id"], s["attempt_id"])],
            "score": s["score"],
            "std": s["samples_std"],
        }
        for s in scored
        if (s["rollout_id"], s["attempt_id"]) in rewards
    ]
    judge = manifest.judge or {}
    return {
        "anchor": f"judge-{manifest.name}-v{manifest.version}",
        "ref": f"{manifest.name}@v{manifest.version}",
        "settings": {k: judge[k] for k in SHOWN_SETTINGS if judge.get(k) is not None},
        "collections": sorted({s["collection_id"] for s in scores} | set(manifest.collections)),
        "scored": len(scored),
        "unscored": len(scores) - len(scored),
        "no_reward": len(scored) - len(points),
        "points": points,
        "spread": [s["samples_std"] for s in scored if s["samples_std"] is not None],
    }


def judge_sections(wh: Warehouse, collections: set[str] | None) -> list[dict[str, Any]]:
    """Every judge layer's section (only those that scored one of ``collections``, when named)."""
    storage = Storage(wh)
    sections = [judge_section(storage, folder, m) for folder, m in latest_judge_layers(storage)]
    return [s for s in sections if collections is None or collections & set(s["collections"])]
