"""The warehouse tables the viewer's commands read.

Connections open only these (``query.connect(only=...)``), so on a warehouse on object
storage `show`, `report` and `export` fetch the silver tables and dataset files they show,
never the bronze spans.
"""

from __future__ import annotations

READ = frozenset(
    {
        "rollouts",
        "attempts",
        "rewards",
        "rollout_rewards",
        "llm_calls",
        "messages",
        "dataset_rows",
        "preference_rows",
    }
)
