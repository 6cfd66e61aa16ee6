"""What one round did: the record both ``tracebank round`` and the Algorithm hand back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tracebank.collect import CollectResult
    from tracebank.train import RunRecord
    from tracebank.transform import TransformResult


@dataclass
class RoundResult:
    """What one round did: what it served, how its rollouts ended, and what each chained stage made."""

    model: str
    """The model folder that was served."""
    served_model: str
    """The name the model server answered to."""
    server_command: list[str]
    """The command line the model server was started with."""
    proxy_model_list: list[dict[str, Any]]
    """The LiteLLM model list the proxy forwarded with."""
    resources_id: str
    """The store's id of the published proxy resource."""
    rollout_ids: list[str]
    """The rollouts enqueued, in task order."""
    statuses: dict[str, int]
    """Rollouts per final status."""
    iteration: int | None = None
    """The Algorithm's iteration, None for a standalone round."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Wall time of each step."""
    collection: CollectResult | None = None
    """The collect result (``--then collect`` and later)."""
    dataset: TransformResult | None = None
    """The dataset version written (``--then transform`` and later)."""
    run: RunRecord | None = None
    """The training run (``--then train``)."""

    @property
    def next_model(self) -> str | None:
        """The trained model folder the next round serves."""
        return self.run.output_dir if self.run is not None else None
