"""The recipe rule set (``--rules recipe``), whatever the engine: 0.3's triplets and the Unsloth
SFT recipe's data step, from the loaded inputs to a committed version.

Order of work: rewarded calls (upstream's adapter + the recipe's reverse walk, ``transform.triplets``)
-> token rows, optionally merged per trajectory (``transform.rows``) -> filters and selection
(``transform.select``) -> each split's files, written by the engine's :data:`SplitWriter` ->
the shared tail (``transform.version``). Everything up to the selection moves only small
per-call columns; the token lists are copied once, a piece at a time, into the files.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import polars as pl
from tracebank.core import memory
from tracebank.transform.config import TransformConfig
from tracebank.transform.errors import EmptyDatasetError
from tracebank.transform.inputs import Chosen, Inputs
from tracebank.transform.retokenize import compare_engine_prompts
from tracebank.transform.rewards import calls_with_layer, layer_scores
from tracebank.transform.rows import CallTokens, RowTokens, build_rows
from tracebank.transform.select import rollout_scores, select_rows
from tracebank.transform.text_rows import (
    MESSAGE_COLUMNS,
    TextInputs,
    add_text_rows,
    mark_text_calls,
    split_text_calls,
)
from tracebank.transform.triplets import CallCounts, rewarded_calls
from tracebank.transform.version import Planned, TransformResult, commit_version
from tracebank.transform.writer import OpenSplit
from tracebank.warehouse import schemas
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.storage import Storage

#: How an engine turns one split's planned rows into files: given where the rows' tokens are,
#: a ``writer.SplitOpener`` (stack, storage, folder, split, row plan, provenance) -> the open split.
SplitWriter = Callable[
    [RowTokens, contextlib.ExitStack[Any], Storage, Path, str, pl.DataFrame, dict[str, Any]], OpenSplit
]


def build_recipe(
    wh: Warehouse,
    config: TransformConfig,
    chosen: Chosen,
    inputs: Inputs,
    tokens: Callable[[], CallTokens],
    write: SplitWriter,
) -> TransformResult:
    """Plan, select and commit the version; ``write`` turns each split's planned rows into files.

    ``tokens`` is only called when rows are materialised on this process
    (``--merge trajectory``, ``--dedup``, or a ``write`` that does it here).
    """
    layer = None
    if config.rewards is not None:  # a reward layer's scores instead of the collected rewards
        layer = layer_scores(wh, config.rewards)
        config = dataclasses.replace(config, rewards=layer[1]["ref"])  # params (and hash) name its version
    text = text_inputs(wh, config, chosen)
    planned, source = plan_recipe(config, chosen, inputs, tokens, layer, text)
    return commit_version(wh, config, chosen, planned, partial(write, source))


def plan_recipe(
    config: TransformConfig,
    chosen: Chosen,
    inputs: Inputs,
    tokens: Callable[[], CallTokens],
    layer: tuple[pl.DataFrame, dict[str, Any]] | None = None,
    text: TextInputs | None = None,
) -> tuple[Planned, RowTokens]:
    """The selected train and validation rows and their counts; where the rows' tokens are.
    ``text`` renders the calls recorded without ids (``transform.text_rows``).

    Raises EmptyDatasetError when no train row is left."""
    call_counts = CallCounts()
    calls, text_calls = mark_text_calls(inputs.calls, text)
    # ``--rewards``: a layer's score is every call's reward, collected reward or not
    rewarded = rewarded_calls(
        calls,
        inputs.rewards,
        inputs.attempts,
        call_counts,
        keep_unrewarded=layer is not None,
        agent=config.agent,
    )
    rewarded = rewarded.sort(["rollout_id", "call_index"])
    tasks = inputs.rollouts.unique("rollout_id", keep="last").select("rollout_id", "task")
    names = inputs.names
    inputs.drop_tables()  # what follows needs only the rewarded calls and the ids' names
    scores = rollout_scores(rewarded)
    recorded = None
    if layer is not None:
        coded = names.code(layer[0], "rollout_id")
        rewarded, scores, recorded = calls_with_layer(rewarded, scores, coded, layer[1])
    del calls
    rewarded, rewarded_text = split_text_calls(rewarded)
    if text is not None:  # the engine ids make the rows; their messages retokenized are only compared
        text.counts["retokenization"] = compare_engine_prompts(rewarded, tokens, text, names)
    rows, source, merge_stats, breaks = build_rows(rewarded, tokens, merge=config.merge == "trajectory")
    if rewarded_text is not None and text is not None:
        rows, source = add_text_rows(rows, source, rewarded_text, text, names)
    scores = scores.join(tasks, on="rollout_id", how="left")
    del rewarded, tasks
    # The recipe's initial order: rollouts in turn, each rollout's calls last to first.
    rows = rows.sort(["rollout_id", "call_index"], descending=[False, True])
    train, validation, select_counts = select_rows(rows, scores, config, source)
    del rows, scores
    train, validation = (names.name(name_collections(f, chosen)) for f in (train, validation))
    tables = {}
    if breaks is not None:  # merged: the calls that could not be, named like the rows
        named = names.name(name_collections(breaks, chosen)).to_arrow()
        tables["merge_diagnostics"] = schemas.conform(named, schemas.MERGE_DIAGNOSTICS)
    del names
    memory.release()

    counts: dict[str, Any] = {
        "collections": len(chosen),
        "silver": inputs.silver_counts,
        **call_counts.as_dict(),
        "merged": merge_stats,
        **select_counts.as_dict(),
    }
    if recorded is not None:
        counts["reward_layer"] = recorded
    if text is not None:
        counts["text"] = {"calls": 0, "tokenizer": text.renderer.info, **text.counts}
        counts["token_source"] = {"engine": _engine_rows(train) + _engine_rows(validation)}
        counts["token_source"]["text"] = train.height + validation.height - counts["token_source"]["engine"]
    elif text_calls:
        counts["text_calls_skipped"] = text_calls  # no --tokenizer: left out, as no_prompt_ids
    counts["kept"] = train.height + validation.height
    if train.height == 0:
        raise EmptyDatasetError(
            f"no rows for {config.name}: {call_counts.calls} usable calls, {call_counts.rewarded} rewarded, "
            f"{sum(call_counts.rejected.values())} rejected, {counts['kept']} kept after the filters",
            _empty_hint(text),
        )
    return Planned({"train": train, "validation": validation}, counts, tables), source


def _empty_hint(text: TextInputs | None) -> str:
    if text is not None and text.counts.get("render_failed"):
        # the first failure quotes a record and an exception, cut to 200 characters (as in the manifest)
        return (
            f"{text.counts['render_failed']} conversations failed to render with the chat template "
            f"(first: {text.counts['first_render_failure']})"
        )
    return 'check the rewards with `tracebank sql "SELECT * FROM rewards"` or relax the options'


def _engine_rows(rows: pl.DataFrame) -> int:
    if "text_row" not in rows.columns:
        return rows.height
    return rows.get_column("text_row").null_count()


def text_inputs(wh: Warehouse, config: TransformConfig, chosen: Chosen) -> TextInputs | None:
    """The tokenizer and messages that render text calls, with ``--tokenizer``."""
    if config.tokenizer is None:
        return None
    from tracebank.transform.text_render import ChatRenderer

    storage = Storage(wh)

    def load(order: int, keys: pl.DataFrame) -> pl.DataFrame:
        table = storage.silver_table(chosen[order][0], "messages", MESSAGE_COLUMNS)
        frame = pl.from_arrow(table)
        assert isinstance(frame, pl.DataFrame)
        return frame.join(keys, on=["rollout_id", "attempt_id", "span_id"], how="semi")

    return TextInputs(ChatRenderer.load(config.tokenizer), load, per_turn=config.per_turn)


def name_collections(rows: pl.DataFrame, chosen: Chosen) -> pl.DataFrame:
    """``rows`` with ``collection_id`` in place of ``source_order`` (a position in ``chosen``)."""
    ids = pl.Series("collection_id", [cid for cid, _ in chosen], dtype=pl.String)
    named = ids.gather(rows.get_column("source_order"))
    return rows.with_columns(named).drop("source_order")
