"""Scoring rollouts with an LLM judge: the prompts the rubric makes, the judge that answers them,
and what names a judge layer (model, its files or endpoint, the rubric, the settings).

Without ``--group`` each rollout is one prompt. With it, rollouts with the same task (its JSON)
are a group, ordered by rollout id: each member's prompt shows every member's answer as
``Candidate 1:`` ... (``{candidates}``) and asks for the score of ``{index}``, so the judge reads
all of them and scores each relative to the others (one score per rollout).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tracebank.rescore.config import JudgeConfig, RescoreConfig
from tracebank.rescore.errors import RescoreUsageError
from tracebank.rescore.geval import JudgeFailed, Judgment
from tracebank.rescore.judge_http import HttpJudge, checked_url, recorded_url
from tracebank.rescore.judge_local import LocalJudge, folder_hash
from tracebank.rescore.record import ScoredRollout
from tracebank.rescore.rubric import Rubric, candidates_text, conversation_text, parse_scale, read_rubric

#: What a judged rollout becomes: a judgment, or the first line of its failure.
Outcome = tuple[Judgment | None, str | None]
Judge = Callable[[str, str], Judgment]


def _task_text(task: Any) -> str:
    return task if isinstance(task, str) else json.dumps(task, sort_keys=True, ensure_ascii=False)


def prompts(rubric: Rubric, records: list[ScoredRollout], group: bool) -> list[str]:
    """One judge prompt per record, in the records' order."""
    values = [
        {
            "task": _task_text(r.task),
            "conversation": conversation_text(r.messages),
            "answer": r.final_response if r.final_response is not None else "(no answer)",
        }
        for r in records
    ]
    if group:
        members: dict[str, list[int]] = {}
        for n, r in enumerate(records):
            members.setdefault(_task_text(r.task), []).append(n)
        for indices in members.values():
            indices.sort(key=lambda n: records[n].rollout_id)
            answers = candidates_text([records[n].final_response for n in indices])
            for position, n in enumerate(indices, 1):
                values[n].update(candidates=answers, index=str(position))
    return [rubric.render(v) for v in values]


def judge_record(config: JudgeConfig, rubric: Rubric) -> dict[str, Any]:
    """What the layer manifest records of the judge (never the key; the URL without its query)."""
    assert config.judge is not None
    record: dict[str, Any] = {"model": config.judge, "rubric_sha256": rubric.sha256, "scale": config.scale}
    if config.judge_url:
        record.update(url=recorded_url(checked_url(config.judge_url)), model_sha256=None)
    else:
        folder = Path(config.judge).expanduser()
        if not folder.is_dir():
            raise RescoreUsageError(
                f"--judge {config.judge} is not a local model folder",
                "give a folder with config.json and the weights, or serve the model and pass --judge-url",
            )
        record.update(model=str(folder.resolve()), model_sha256=folder_hash(folder), url=None)
    record.update(
        samples=config.samples,
        temperature=config.temperature if config.samples else None,
        seed=config.seed if config.samples else None,
        group=config.group,
    )
    return record


def judge_identity(record: dict[str, Any]) -> str:
    """The hash a judge layer is named by (with the collections): same judge, rubric, settings."""
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


def load_judge(config: RescoreConfig) -> tuple[Rubric, Judge]:
    j = config.judging
    assert j.judge is not None and j.rubric is not None
    rubric, scale = read_rubric(j.rubric), parse_scale(j.scale)
    if j.group and "candidates" not in rubric.slots:
        raise RescoreUsageError("--group needs a rubric that shows {candidates} (and asks about {index})")
    if j.judge_url:
        return rubric, HttpJudge(
            j.judge_url, j.judge, scale, j.samples, j.temperature, j.seed, j.judge_timeout_s
        )
    folder = Path(j.judge).expanduser()
    try:
        return rubric, LocalJudge(folder, scale, j.samples, j.temperature, j.seed)
    except RescoreUsageError:
        raise
    except Exception as exc:  # transformers' own errors: no config.json, unknown architecture...
        first = (str(exc).strip().splitlines() or [""])[0]
        raise RescoreUsageError(
            f"cannot load judge model {folder}: {type(exc).__name__}: {first}"[:400],
            "--judge needs a transformers causal LM folder (config.json, tokenizer, weights)",
        ) from None


def _one(judge: Judge, prompt: str, key: str) -> Outcome:
    try:
        return judge(prompt, key), None
    except JudgeFailed as exc:
        return None, f"JudgeFailed: {exc}"
    except Exception as exc:  # a judge that breaks on one prompt fails that rollout only
        text = str(exc).strip().splitlines()
        return None, f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def judge_all(
    judge: Judge, texts: list[str], records: list[ScoredRollout], threads: int
) -> Iterator[tuple[int, Outcome]]:
    """(index, outcome) per prompt as they finish; an endpoint is asked ``threads`` at a time."""
    keys = [f"{r.collection_id}/{r.rollout_id}" for r in records]
    if isinstance(judge, LocalJudge) or threads == 1:  # one model in this process: one at a time
        for n, (text, key) in enumerate(zip(texts, keys, strict=True)):
            yield n, _one(judge, text, key)
        return
    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(_one, judge, text, key) for text, key in zip(texts, keys, strict=True)]
        for n, future in enumerate(futures):
            yield n, future.result()
