"""Agent Lightning 1.0's RolloutAdapter row logic, ported as the test oracle.

``agentlightning/verl/rollout_adapter.py`` (1.0.2, same as tag v1.0.0 for these
lines) imports torch, tensordict and verl, and verl cannot be imported on CPU, so
``get_train_data_batch``'s row building is copied here line for line minus the
tensors: each row is kept unpadded (padding is a function of the row and the
limits). Its input is what 1.0's ``AglRolloutManager._build_completed_rollout``
produced for real (the tests run that code in the 1.0 env), as JSON.

Multimodal, routed-experts and wandb branches are left out: text rollouts never
take them. The trajectory branch's ``merge_mismatch_rows`` (what 1.0 uploads to W&B as
``training/trace_merge_mismatches`` and counts as ``training/n_trace_merge_mismatch_rows``,
with ``training/n_unmerged_rollouts``) are kept, less the decoded trace texts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_TRACE_MERGE_MISMATCH_WANDB_LIMIT = 100


@dataclass(frozen=True)
class OracleRow:
    rollout_id: str
    data_id: str
    turn_index: int | None
    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    response_mask: tuple[int, ...] | None
    response_log_probs: tuple[float, ...] | None
    reward: float
    is_drop: bool


def ids_startswith(full_ids: list[int], prefix_ids: list[int]) -> bool:
    return full_ids[: len(prefix_ids)] == prefix_ids


def rollout_adapter_rows(
    completed_rollouts: list[dict[str, Any]],
    *,
    max_prompt_length: int,
    max_response_length: int,
    max_total_length: int | None = None,
    reward_fillna_value: float = 0.0,
    trace_aggregator_level: str = "transition",
    merge_mismatch_rows: list[dict[str, Any]] | None = None,
    metrics: dict[str, int] | None = None,
    global_steps: int = 0,
) -> list[OracleRow]:
    merge_mismatch_rows = [] if merge_mismatch_rows is None else merge_mismatch_rows
    unmerged_count = 0
    level = trace_aggregator_level
    if level not in {"transition", "trajectory"}:
        raise ValueError(f"Unknown trace_aggregator_level: {level}")
    sorted_rollouts = sorted(completed_rollouts, key=lambda r: (r["step"], r["sample_idx_in_step"]))
    rows: list[OracleRow] = []

    def append_training_row(
        *,
        rollout_id: str,
        data_id: str,
        turn_index: int,
        prompt_ids: list[int],
        response_ids: list[int],
        reward: float,
        response_mask: list[int] | None = None,
        response_log_probs: list[float] | None = None,
    ) -> None:
        if len(prompt_ids) > max_prompt_length:
            prompt_ids = prompt_ids[:max_prompt_length]
            is_drop = True
        else:
            is_drop = False

        response_limit = max_response_length
        if max_total_length is not None:
            response_limit = min(response_limit, max(max_total_length - len(prompt_ids), 0))
        if len(response_ids) > response_limit:
            response_ids = response_ids[:response_limit]
            if response_mask is not None:
                response_mask = response_mask[:response_limit]
            if response_log_probs is not None:
                response_log_probs = response_log_probs[:response_limit]

        if response_log_probs is not None and len(response_log_probs) != len(response_ids):
            response_log_probs = None

        train_token_count = sum(response_mask) if response_mask is not None else len(response_ids)
        if train_token_count == 0:
            return
        rows.append(
            OracleRow(
                rollout_id=rollout_id,
                data_id=data_id,
                turn_index=turn_index if level == "transition" else None,
                prompt_ids=tuple(prompt_ids),
                response_ids=tuple(response_ids),
                response_mask=tuple(response_mask) if response_mask is not None else None,
                response_log_probs=tuple(response_log_probs) if response_log_probs is not None else None,
                reward=reward,
                is_drop=is_drop,
            )
        )

    for rollout in sorted_rollouts:
        final_reward = rollout["final_reward"] if rollout["final_reward"] is not None else reward_fillna_value
        triplets = rollout["triplets"]
        if not triplets:
            continue
        if level == "transition":
            for turn_index, triplet in enumerate(triplets):
                append_training_row(
                    rollout_id=rollout["rollout_id"],
                    data_id=rollout["data_id"],
                    turn_index=turn_index,
                    prompt_ids=triplet["prompt"]["token_ids"],
                    response_ids=triplet["response"]["token_ids"],
                    reward=final_reward,
                    response_log_probs=triplet["response"]["log_probs"],
                )
            continue
        first = triplets[0]
        group_start_turn_index = 0
        current_prompt_ids = list(first["prompt"]["token_ids"])
        current_response_ids = list(first["response"]["token_ids"])
        current_context = current_prompt_ids + current_response_ids
        current_response_mask = [1] * len(current_response_ids)
        current_response_log_probs = first["response"]["log_probs"]
        if current_response_log_probs is not None:
            current_response_log_probs = list(current_response_log_probs)
        merged_group_count = 0

        for turn_index, triplet in enumerate(triplets[1:], start=1):
            prompt_ids = triplet["prompt"]["token_ids"]
            response_ids = triplet["response"]["token_ids"]
            log_probs = triplet["response"]["log_probs"]
            next_context = prompt_ids + response_ids
            if ids_startswith(prompt_ids, current_context):
                if len(prompt_ids) > len(current_context):
                    observation_ids = prompt_ids[len(current_context) :]
                    current_response_ids += observation_ids
                    current_response_mask += [0] * len(observation_ids)
                    if current_response_log_probs is not None:
                        current_response_log_probs += [0.0] * len(observation_ids)
                current_response_ids += response_ids
                current_response_mask += [1] * len(response_ids)
                if current_response_log_probs is not None:
                    if log_probs is None or len(log_probs) != len(response_ids):
                        current_response_log_probs = None
                    else:
                        current_response_log_probs += list(log_probs)
                current_context = next_context
                continue

            if len(merge_mismatch_rows) < _TRACE_MERGE_MISMATCH_WANDB_LIMIT:
                merge_mismatch_rows.append(
                    {
                        "global_steps": global_steps,
                        "rollout_id": rollout["rollout_id"],
                        "data_id": rollout["data_id"],
                        "turn_index": turn_index,
                        # Token-prefix failures are classified as other mismatches.
                        "template_mismatch": False,
                        "retoken_mismatch": False,
                        "others_mismatch": True,
                        "prompt_length": len(prompt_ids),
                        "response_length": len(response_ids),
                        "previous_trace_length": len(current_context),
                        "current_trace_length": len(next_context),
                    }
                )

            append_training_row(
                rollout_id=rollout["rollout_id"],
                data_id=rollout["data_id"],
                turn_index=group_start_turn_index,
                prompt_ids=current_prompt_ids,
                response_ids=current_response_ids,
                reward=final_reward,
                response_mask=current_response_mask,
                response_log_probs=current_response_log_probs,
            )
            group_start_turn_index = turn_index
            current_context = next_context
            current_prompt_ids = list(prompt_ids)
            current_response_ids = list(response_ids)
            current_response_mask = [1] * len(response_ids)
            current_response_log_probs = list(log_probs) if log_probs is not None else None
            merged_group_count += 1

        append_training_row(
            rollout_id=rollout["rollout_id"],
            data_id=rollout["data_id"],
            turn_index=group_start_turn_index,
            prompt_ids=current_prompt_ids,
            response_ids=current_response_ids,
            reward=final_reward,
            response_mask=current_response_mask,
            response_log_probs=current_response_log_probs,
        )
        merged_group_count += 1
        if merged_group_count > 1:
            unmerged_count += 1
    if metrics is not None and level == "trajectory":
        metrics["training/n_unmerged_rollouts"] = unmerged_count
        metrics["training/n_trace_merge_mismatch_rows"] = len(merge_mismatch_rows)
    return rows
