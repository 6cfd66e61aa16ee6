"""With ``--tokenizer``, engine calls that also kept their messages are retokenized and compared.

A vLLM-served call logged with ``return_token_ids`` (``collect --format openai``) holds both the ids
the engine saw and the request's messages. Its rows keep the engine's ids: they are what the model
was conditioned on. This module renders the same request (its input messages and tools, with
``add_generation_prompt=True``, as a server renders a chat request) through the tokenizer's chat
template and counts how many calls come out equal (``counts.text.retokenization``), naming the first
difference. A difference is not an error: it says that training on re-rendered text would not see
what the served model saw. Typical causes: another template or tokenizer than the server's (a newer
revision, a server ``--chat-template``), special tokens the server added or left out (BOS), text the
logging path normalised (whitespace, Unicode), and tool definitions whose JSON key order the archive
does not keep (bronze stores JSON with sorted keys; a template's ``tojson`` renders that order).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import polars as pl
from tracebank.transform.agl1_rows import first_difference
from tracebank.transform.ids import IdNames
from tracebank.transform.rows import CallTokens
from tracebank.transform.text_rows import TextInputs, messages_of


@dataclass
class Retokenization:
    """How the engine calls' prompt ids compare with their messages retokenized."""

    compared: int = 0
    equal: int = 0
    differ: int = 0
    no_messages: int = 0
    """Engine calls without recorded request messages: nothing to retokenize."""
    failed: int = 0
    """Calls whose messages the template raised on (hostile records, ``raise_exception``)."""
    first_diff: dict[str, Any] | None = None
    """rollout_id, span_id, position, engine_token, retokenized_token (None past a sequence's end)."""
    first_failure: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def compare_engine_prompts(
    calls: pl.DataFrame, tokens: Callable[[], CallTokens], text: TextInputs, names: IdNames
) -> dict[str, Any]:
    """Retokenize the request messages of the engine ``calls`` (coded ids, ``tok``, ``source_order``)
    and compare with their prompt ids; ``tokens`` is only called when some call has messages."""
    out = Retokenization()
    if calls.height == 0:
        return out.as_dict()
    calls = calls.sort(["rollout_id", "call_index"])
    named = names.name(calls.select("rollout_id", "attempt_id", "span_id"))
    keyed = pl.concat([calls.select("source_order"), named], how="horizontal_extend")
    requests = messages_of(keyed, text.load_messages, answer=False)
    with_messages = [i for i, key in enumerate(named.iter_rows()) if requests.get(key, ([], None))[0]]
    out.no_messages = calls.height - len(with_messages)
    if not with_messages:
        return out.as_dict()
    tok = calls.get_column("tok").to_numpy()[with_messages].astype(np.int64)
    prompts, _ = tokens().lists(tok)
    for i, engine in zip(with_messages, prompts.to_pylist(), strict=True):
        key = named.row(i)
        rollout, span = key[0], key[2]
        try:
            retokenized = text.renderer.prompt(*requests[key]).tolist()
        except Exception as exc:  # noqa: BLE001  the template is code run over hostile records
            out.failed += 1
            out.first_failure = out.first_failure or f"{rollout}: {type(exc).__name__}: {str(exc)[:200]}"
            continue
        out.compared += 1
        engine = engine or []
        if engine == retokenized:
            out.equal += 1
            continue
        out.differ += 1
        if out.first_diff is None:
            position = first_difference(engine, retokenized)
            out.first_diff = {
                "rollout_id": rollout,
                "span_id": span,
                "position": position,
                "engine_token": _at(engine, position),
                "retokenized_token": _at(retokenized, position),
            }
    return out.as_dict()


def _at(ids: list[int], position: int) -> int | None:
    return ids[position] if position < len(ids) else None
