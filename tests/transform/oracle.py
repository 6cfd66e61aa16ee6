"""The reference: agentlightning's own adapter + the recipe's data step, and spans to feed it.

``oracle_rows`` is upstream's ``LlmProxyTraceToTriplet().adapt`` per rollout
followed by the data step of ``examples/unsloth/sft_algorithm.py`` copied
as is (only the module-level ``random`` became a seeded ``random.Random``).
``scenario`` builds rollouts covering every case design.md names.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tests.fixtures.proxy_spans import Call, call_spans, plain_span, random_rollout_spans, reward_span


def oracle_rows(
    latest_spans: Mapping[str, Sequence[Any]], triplet_fraction: float = 1.0, seed: int = 0
) -> list[dict[str, Any]]:
    """Rows the upstream recipe builds from each rollout's latest-attempt spans."""
    import agentlightning as agl

    logging.getLogger("agentlightning").setLevel(logging.ERROR)
    rng = random.Random(seed)
    all_triplets = []
    data_adapter = agl.LlmProxyTraceToTriplet()
    for rollout_id in sorted(latest_spans):
        spans = list(latest_spans[rollout_id])
        triplets = data_adapter.adapt(spans)
        recent_reward = None
        for triplet in reversed(triplets):
            if triplet.reward is not None:
                recent_reward = triplet.reward
            if recent_reward is None:
                continue
            input_ids = triplet.prompt["token_ids"] + triplet.response["token_ids"]
            labels = [-100] * len(triplet.prompt["token_ids"]) + triplet.response["token_ids"]
            all_triplets.append(
                {
                    "input_ids": input_ids,
                    "attention_mask": [1] * len(input_ids),
                    "labels": labels,
                    "reward": recent_reward,
                }
            )
    rng.shuffle(all_triplets)
    all_triplets.sort(key=lambda x: x["reward"], reverse=True)
    sliced_triplets = all_triplets[: max(1, int(len(all_triplets) * triplet_fraction))]
    rng.shuffle(sliced_triplets)
    return sliced_triplets


def row_key(row: Mapping[str, Any]) -> tuple:
    return (tuple(row["input_ids"]), tuple(row["attention_mask"]), tuple(row["labels"]), float(row["reward"]))


class Scenario:
    """Spans of many rollouts (all attempts), which attempt is latest, and task inputs."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.attempts: list[dict[str, Any]] = []
        self.inputs: dict[str, Any] = {}
        self._latest: dict[str, tuple[int, str]] = {}

    def add(
        self,
        rollout_id: str,
        spans: list[Any],
        attempt_id: str | None = None,
        attempt_seq: int = 1,
        task: Any = None,
    ) -> None:
        attempt_id = attempt_id or f"{rollout_id}-a{attempt_seq}"
        assert all(s.attempt_id == attempt_id for s in spans), "spans built for another attempt"
        self.spans += spans
        self.attempts.append(
            {
                "rollout_id": rollout_id,
                "attempt_id": attempt_id,
                "sequence_id": attempt_seq,
                "status": "succeeded",
                "start_time": 1.0 * attempt_seq,
                "metadata": {},
            }
        )
        self.inputs[rollout_id] = task if task is not None else {"task": rollout_id}
        if attempt_seq >= self._latest.get(rollout_id, (0, ""))[0]:
            self._latest[rollout_id] = (attempt_seq, attempt_id)

    def latest_spans(self) -> dict[str, list[Any]]:
        """What ``store.query_spans(rollout_id, "latest")`` would hand the recipe."""
        out: dict[str, list[Any]] = {rid: [] for rid in self._latest}
        for s in self.spans:
            if self._latest[s.rollout_id][1] == s.attempt_id:
                out[s.rollout_id].append(s)
        return out

    def rollouts(self) -> list[dict[str, Any]]:
        return [
            {
                "rollout_id": rid,
                "input": self.inputs[rid],
                "start_time": 1.0,
                "end_time": 2.0,
                "mode": "train",
                "resources_id": "rs",
                "status": "succeeded",
                "config": {},
                "metadata": {},
            }
            for rid in sorted(self.inputs)
        ]


def _ids(rng: random.Random, n: int, vocab: int = 500) -> list[int]:
    return [rng.randrange(vocab) for _ in range(n)]


def scenario(seed: int = 0, n_random: int = 30, random_id: Callable[[int], str] | None = None) -> Scenario:
    """Every case of the anchor: see the comments; plus ``n_random`` ordinary rollouts (the ``i``-th
    with id ``random_id(i)``, ``r-rand-00i`` by default)."""
    rng = random.Random(seed)
    sc = Scenario()
    t = 1_700_000_000.0

    # Duplicate response ids: the second call reuses the first's id, only the first counts.
    r, a = "r-dup", "r-dup-a1"
    spans = call_spans(r, a, 1, Call(_ids(rng, 20), _ids(rng, 5), response_id="chatcmpl-same"), t)
    spans += call_spans(r, a, 2, Call(_ids(rng, 22), _ids(rng, 6), response_id="chatcmpl-same"), t + 1)
    spans += call_spans(r, a, 3, Call(_ids(rng, 24), _ids(rng, 7)), t + 2)
    spans.append(reward_span(r, a, 4, 0.7, t + 3))
    sc.add(r, spans, a)

    # Empty token lists (response, then prompt) are not calls.
    r, a = "r-empty", "r-empty-a1"
    spans = call_spans(r, a, 1, Call(_ids(rng, 10), []), t)
    spans += call_spans(r, a, 2, Call([], _ids(rng, 4)), t + 1)
    spans += call_spans(r, a, 3, Call(_ids(rng, 12), _ids(rng, 4)), t + 2)
    spans.append(reward_span(r, a, 4, 0.4, t + 3))
    sc.add(r, spans, a)

    # No reward at all: no rows.
    r, a = "r-noreward", "r-noreward-a1"
    sc.add(r, random_rollout_spans(r, a, rng, n_calls=3, reward=None), a)

    # Several rewards: mid-trajectory and final; one before any call (unmatched); two in a row.
    r, a = "r-several", "r-several-a1"
    spans = [reward_span(r, a, 0, 0.05, t - 1)]
    spans += call_spans(r, a, 1, Call(_ids(rng, 15), _ids(rng, 5)), t)
    spans += call_spans(r, a, 2, Call(_ids(rng, 16), _ids(rng, 5)), t + 1)
    spans.append(reward_span(r, a, 3, 0.3, t + 2))
    spans += call_spans(r, a, 4, Call(_ids(rng, 17), _ids(rng, 5)), t + 3)
    spans += call_spans(r, a, 5, Call(_ids(rng, 18), _ids(rng, 5)), t + 4)
    spans.append(reward_span(r, a, 6, 0.9, t + 5))
    spans.append(reward_span(r, a, 7, 0.6, t + 6))
    spans += call_spans(r, a, 8, Call(_ids(rng, 19), _ids(rng, 5)), t + 7)  # after the last reward
    sc.add(r, spans, a)

    # A reward with the same sequence id as a call does not go to that call.
    r, a = "r-sameseq", "r-sameseq-a1"
    spans = call_spans(r, a, 1, Call(_ids(rng, 9), _ids(rng, 3)), t)
    spans += call_spans(r, a, 2, Call(_ids(rng, 9), _ids(rng, 3)), t + 1)
    spans.append(reward_span(r, a, 2, 0.55, t + 1.5))
    sc.add(r, spans, a)

    # AgentOps payloads: task.output, entity.output, and a None value (no reward).
    r, a = "r-agentops", "r-agentops-a1"
    spans = call_spans(r, a, 1, Call(_ids(rng, 11), _ids(rng, 3)), t)
    spans.append(
        plain_span(
            r,
            a,
            2,
            "agentops.operation",
            {"agentops.entity.output": json.dumps({"type": "reward", "value": 0.25})},
            t + 1,
        )
    )
    spans += call_spans(r, a, 3, Call(_ids(rng, 11), _ids(rng, 3)), t + 2)
    spans.append(
        plain_span(
            r,
            a,
            4,
            "agentops.task",
            {"agentops.task.output": json.dumps({"type": "reward", "value": None})},
            t + 3,
        )
    )
    spans += call_spans(r, a, 5, Call(_ids(rng, 13), _ids(rng, 3)), t + 4)
    spans.append(reward_span(r, a, 6, 0.8, t + 5, agentops=True))
    sc.add(r, spans, a)

    # v0.2 reward spans: an annotation with a plain `reward` attribute.
    r, a = "r-v02", "r-v02-a1"
    spans = call_spans(r, a, 1, Call(_ids(rng, 8), _ids(rng, 2)), t)
    spans.append(plain_span(r, a, 2, "agentlightning.annotation", {"reward": 0.45}, t + 1))
    sc.add(r, spans, a)

    # Token ids on litellm_request (no raw span), and on both spans of one call (same id: once).
    r, a = "r-litellm", "r-litellm-a1"
    spans = call_spans(r, a, 1, Call(_ids(rng, 14), _ids(rng, 4), ids_on_litellm=True, with_raw=False), t)
    spans += call_spans(r, a, 2, Call(_ids(rng, 14), _ids(rng, 4), ids_on_litellm=True), t + 1)
    spans.append(reward_span(r, a, 3, 0.35, t + 2))
    sc.add(r, spans, a)

    # Old `agl vllm` patch: response ids in llm.hosted_vllm.response_token_ids.
    r, a = "r-oldpatch", "r-oldpatch-a1"
    spans = call_spans(r, a, 1, Call(_ids(rng, 10), _ids(rng, 6), old_patch=True), t)
    spans.append(reward_span(r, a, 2, 0.65, t + 1))
    sc.add(r, spans, a)

    # Message text that looks like token ids, with both kinds of quotes, inside choices.
    r, a = "r-content", "r-content-a1"
    tricky = [
        "it's 'token_ids': [1, 2, 3]",
        'say "token_ids": [4] and it\'s done',
        "plain 'token_ids': [7, 7]",
        "{'index': 0, 'token_ids': [9]} \\' \\\\",
    ]
    spans = []
    for i, reply in enumerate(tricky):
        spans += call_spans(r, a, i + 1, Call(_ids(rng, 6), _ids(rng, 3), reply=reply), t + i)
    spans.append(reward_span(r, a, len(tricky) + 1, 0.5, t + 9))
    sc.add(r, spans, a)

    # Several attempts: only the latest attempt's spans count.
    r = "r-attempts"
    first = random_rollout_spans(r, f"{r}-a1", rng, n_calls=2, reward=1.0)
    latest = random_rollout_spans(r, f"{r}-a2", rng, n_calls=2, reward=0.15)
    sc.add(r, first, f"{r}-a1", attempt_seq=1)
    sc.add(r, latest, f"{r}-a2", attempt_seq=2)

    # Out-of-order: spans arrive shuffled and sequence ids are not in list order.
    r, a = "r-order", "r-order-a1"
    spans = random_rollout_spans(r, a, rng, n_calls=4, reward=0.95)
    rng.shuffle(spans)
    sc.add(r, spans, a)

    for i in range(n_random):
        r = random_id(i) if random_id else f"r-rand-{i:03d}"
        a = f"{r}-a1"
        reward = None if i % 9 == 8 else round(rng.choice([0.0, 0.1, 0.5, 0.5, 1.0, rng.random()]), 3)
        sc.add(
            r,
            random_rollout_spans(
                r,
                a,
                rng,
                n_calls=rng.randint(1, 4),
                reward=reward,
                prompt_len=rng.randint(5, 30),
                response_len=rng.randint(1, 8),
            ),
            a,
            task={"q": f"task-{i % 7}"},
        )
    return sc


def scenario_warehouse(root: Any, seed: int, n_random: int) -> Any:
    """A new warehouse under ``root`` holding ``scenario(seed, n_random)`` as collection ``c1``."""
    from tracebank.warehouse.location import Warehouse

    from tests.fixtures.bronze import commit_collection

    wh = Warehouse(root / "warehouse").init()
    sc = scenario(seed=seed, n_random=n_random)
    commit_collection(wh, sc.spans, rollouts=sc.rollouts(), attempts=sc.attempts, collection_id="c1")
    return wh
