"""What a scorer is given: one archived rollout, as a typed, plain-data record.

A scorer is ``def score(rollout: ScoredRollout) -> float | None``. It runs in worker processes,
so the record holds only plain data (strings, numbers, lists and dicts of them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ScoredRollout:
    """One archived rollout's latest attempt, as its agent saw it."""

    rollout_id: str
    """The rollout's id."""
    attempt_id: str
    """Its latest attempt (the one scored)."""
    collection_id: str
    """The collection that holds it."""
    task: Any
    """The rollout's input (the task the agent was given), parsed from its JSON."""
    messages: list[dict[str, Any]] = field(default_factory=list)
    """The last LLM call's conversation: its request messages then its response, OpenAI-style dicts
    (``role``, ``content``, and ``tool_calls`` / ``tool_call_id`` where present)."""
    final_response: str | None = None
    """The text of the last response (None when the rollout made no call with a text answer)."""
    reward: float | None = None
    """The final reward collected with the rollout (None when it had none)."""
