"""A ``--kind preference`` version: pairs of same-task rollouts, committed like an SFT version.

Reads the chosen collections' silver ``llm_calls`` and ``rewards`` (with their token lists; a
preference version is small next to the SFT rows it could be), keeps what the SFT recipe keeps
(each rollout's latest attempt, usable calls carrying a reward: ``transform.triplets``), gives
every rollout its final reward (or its score in a reward layer, ``--rewards``) and its task (the
call's ``data_id`` where 1.0 recorded one, else the rollout's input), builds one candidate per
call (``--unit call``) or per trajectory (``--unit trajectory``), and lets
:func:`tracebank.transform.preference.select_pairs` choose the pairs.

The content hash covers the options, the sources (and the reward layer) and the rows; a version
identical to an existing one is not written (unless ``--force``).
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any

import polars as pl
import pyarrow as pa
from tracebank.transform.agent_key import agent_key as agent_key_of
from tracebank.transform.config import TAG, TransformConfig
from tracebank.transform.errors import EmptyDatasetError
from tracebank.transform.inputs import CALL_COLUMNS as SFT_CALL_COLUMNS
from tracebank.transform.inputs import REWARD_COLUMNS, TOKEN_COLUMNS, Chosen, require_silver
from tracebank.transform.preference import select_pairs
from tracebank.transform.rewards import layer_scores, scored_only
from tracebank.transform.select import rollout_scores
from tracebank.transform.triplets import CallCounts, rewarded_calls
from tracebank.transform.version import Planned, TransformResult, commit_version
from tracebank.transform.writer import whole_split
from tracebank.warehouse import schemas
from tracebank.warehouse.contract import IGNORE_INDEX
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.storage import Storage, read_table

#: The silver columns a pair needs: the SFT path's (triplets' ordering and filtering), the task, the tokens.
CALL_COLUMNS = [*SFT_CALL_COLUMNS, "data_id", *TOKEN_COLUMNS]

#: The table a preference version's files hold (a view of its own; ``dataset_rows`` is SFT's).
TABLE = "preference_rows"


def _frame(table: pa.Table) -> pl.DataFrame:
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame


def _with_order(table: pa.Table, order: int) -> pl.DataFrame:
    return _frame(table).with_columns(pl.lit(order, pl.Int32).alias("source_order"))


def load_calls(
    wh: Warehouse,
    chosen: Chosen,
    keep_unrewarded: bool = False,
    agent: str | None = None,
    agent_key: str = TAG,
) -> tuple[pl.DataFrame, pl.DataFrame, CallCounts]:
    """(rewarded calls with tokens and task, each rollout's task, the call counts) of ``chosen``;
    ``keep_unrewarded`` keeps the calls no collected reward reaches too (a reward layer scores them);
    ``agent`` keeps only the calls of the agents it matches (``--agent``), named by ``agent_key``."""
    storage = Storage(wh)
    agents = agent_key_of(agent_key)
    calls, rewards, attempts, inputs = [], [], [], []
    for order, (cid, manifest) in enumerate(chosen):
        require_silver(storage, cid)
        table = agents.named(storage, cid, storage.silver_table(cid, "llm_calls", CALL_COLUMNS))
        calls.append(_with_order(table, order))
        rewards.append(_with_order(storage.silver_table(cid, "rewards", REWARD_COLUMNS), order))
        folder = wh.collection_dir(cid)
        attempts.append(_frame(read_table(storage.files_of(folder, manifest, "attempts"))))
        inputs.append(
            _frame(read_table(storage.files_of(folder, manifest, "rollouts")).select(["rollout_id", "input"]))
        )
    counts = CallCounts()
    attempt_frame = pl.concat([a.select("rollout_id", "attempt_id", "sequence_id") for a in attempts])
    rewarded = rewarded_calls(
        pl.concat(calls, how="vertical_relaxed"),
        pl.concat(rewards),
        attempt_frame,
        counts,
        keep_unrewarded,
        agent,
    )
    # 1.0's sibling key where it recorded one, else the rollout's input (0.3's task); without either a
    # rollout is a task of its own (a singleton), never grouped with other task-less rollouts
    data_ids = rewarded.group_by("rollout_id").agg(pl.col("data_id").drop_nulls().first())
    tasks = (
        pl.concat(inputs)
        .unique("rollout_id", keep="last")
        .join(data_ids, on="rollout_id", how="inner")
        .select("rollout_id", pl.coalesce("data_id", "input", "rollout_id").alias("task"))
    )
    return rewarded.drop("data_id"), tasks, counts


def call_candidates(calls: pl.DataFrame) -> pl.DataFrame:
    """One candidate per call: its prompt, and its response trained whole."""
    return calls.select(
        "task",
        "rollout_id",
        pl.col("call_index").alias("order"),
        pl.col("prompt_token_ids").alias("prompt"),
        pl.col("response_token_ids").alias("completion"),
        pl.col("response_token_ids").alias("labels"),
        "reward",
    )


def merged_trajectory(prompts: list[list[int]], responses: list[list[int]]) -> tuple[list[int], list[int]]:
    """(completion, labels) after the first prompt: the calls that extend the previous call's prompt +
    response, merged as ``--merge trajectory`` merges them (tokens between responses masked)."""
    first = prompts[0]
    seq, labels = first + responses[0], [IGNORE_INDEX] * len(first) + responses[0]
    for prompt, response in zip(prompts[1:], responses[1:], strict=True):
        if prompt[: len(seq)] != seq:
            break  # a prefix break: the trajectory ends here
        labels += [IGNORE_INDEX] * (len(prompt) - len(seq)) + response
        seq = prompt + response
    return seq[len(first) :], labels[len(first) :]


def trajectory_candidates(calls: pl.DataFrame) -> pl.DataFrame:
    """One candidate per rollout: its first prompt, and the trajectory that follows it."""
    rows: dict[str, list[Any]] = {c: [] for c in ("task", "rollout_id", "order", "prompt")}
    rows.update(completion=[], labels=[], reward=[])
    for (rid,), group in calls.sort(["rollout_id", "call_index"]).group_by("rollout_id", maintain_order=True):
        prompts = group.get_column("prompt_token_ids").to_list()
        completion, labels = merged_trajectory(prompts, group.get_column("response_token_ids").to_list())
        for key, value in (
            ("task", group.item(0, "task")),
            ("rollout_id", rid),
            ("order", 0),
            ("prompt", prompts[0]),
            ("completion", completion),
            ("labels", labels),
            ("reward", group.item(0, "reward")),
        ):
            rows[key].append(value)
    dtypes = {"prompt": pl.List(pl.Int32), "completion": pl.List(pl.Int32), "labels": pl.List(pl.Int32)}
    return pl.DataFrame(rows, schema_overrides={**dtypes, "reward": pl.Float64, "task": pl.String})


def candidates_of(calls: pl.DataFrame, tasks: pl.DataFrame, scores: pl.DataFrame, unit: str) -> pl.DataFrame:
    """Candidates of ``unit`` from the rewarded calls, each carrying its rollout's task and score."""
    calls = calls.drop("reward").join(tasks, on="rollout_id").join(scores, on="rollout_id")
    calls = calls.rename({"score": "reward"})
    return call_candidates(calls) if unit == "call" else trajectory_candidates(calls)


def _lengths(table: pa.Table, column: str) -> pl.Series:
    return pl.Series([len(v) for v in table.column(column).to_pylist()], dtype=pl.Int64)


def plan_of(table: pa.Table) -> pl.DataFrame:
    """The row plan the shared tail's statistics read: a pair's length (its prompt and longer
    answer), the tokens it trains (both answers) and the chosen answer's reward."""
    prompt, chosen, rejected = (
        _lengths(table, c) for c in ("prompt_input_ids", "chosen_input_ids", "rejected_input_ids")
    )
    longer = pl.DataFrame({"c": chosen, "r": rejected}).max_horizontal()
    return pl.DataFrame(
        {
            "length": prompt + longer,
            "trained": chosen + rejected,
            "reward": table.column("chosen_reward").to_pylist(),
        }
    )


def _margins(table: pa.Table) -> dict[str, Any]:
    chosen, rejected = (table.column(c).to_pylist() for c in ("chosen_reward", "rejected_reward"))
    margins = [c - r for c, r in zip(chosen, rejected, strict=True)]
    return {"min": min(margins), "mean": round(sum(margins) / len(margins), 6), "max": max(margins)}


def build_preference(wh: Warehouse, config: TransformConfig, chosen: Chosen) -> TransformResult:
    """Commit the next version of ``config.name`` with preference pairs (see the module docstring)."""
    calls, tasks, call_counts = load_calls(
        wh, chosen, keep_unrewarded=config.rewards is not None, agent=config.agent, agent_key=config.agent_key
    )
    scores = rollout_scores(calls)
    layer_counts: dict[str, Any] = {}
    if config.rewards is not None:  # every rollout the layer scored, collected reward or not
        layer, record = layer_scores(wh, config.rewards)
        scores, record = scored_only(scores, layer, record)
        config = dataclasses.replace(config, rewards=record["ref"])  # params (and hash) name its version
        layer_counts = {"reward_layer": record}
    pairs, counts = select_pairs(
        candidates_of(calls, tasks, scores, config.preference.unit), config.preference
    )
    table = pairs.to_arrow().cast(schemas.PREFERENCE_ROWS)
    if table.num_rows == 0:
        raise EmptyDatasetError(
            f"no pairs for {config.name}: {counts.rollouts} rewarded rollouts in {counts.tasks} tasks, "
            f"{counts.groups} groups with a shared prompt, {counts.ties} ties, "
            f"{counts.below_margin} below the margin",
            "preference pairs need several rollouts of a task with different rewards; "
            "check --min-margin and --unit",
        )
    reported: dict[str, Any] = {
        "collections": len(chosen),
        **call_counts.as_dict(),
        **counts.as_dict(),
        "margin": _margins(table),
        **layer_counts,
    }
    planned = Planned({"train": plan_of(table)}, reported)
    return commit_version(wh, config, chosen, planned, partial(whole_split, table, table_name=TABLE))
