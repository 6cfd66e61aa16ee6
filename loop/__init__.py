"""The serving loop: whole rounds (serve, proxy, roll out, collect, transform, train) and the demo.

With the CLI, the only package that imports several stages. Entries:
``run_round`` / ``serve_round`` (one round), ``WarehouseSupervisedFinetuning``
(the agentlightning Algorithm, built on first access: agentlightning is slow to
import), ``run_demo``; ``LocalRunners`` runs agentlightning's own runners.
"""

import os
from typing import Any

# LiteLLM (imported with agentlightning) otherwise fetches a price map from the internet at import
# time and stalls for seconds without a network; the bundled copy is enough.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from tracebank.loop.config import AlgorithmConfig, DemoConfig, RoundConfig, ServerConfig, StagesConfig
from tracebank.loop.demo import DemoResult, run_demo
from tracebank.loop.errors import LoopError, LoopUsageError, NoSucceededRolloutsError, RoundTimeoutError
from tracebank.loop.result import RoundResult
from tracebank.loop.round import run_round, serve_round
from tracebank.loop.runners import LocalRunners, load_agent
from tracebank.loop.servers import next_model_path
from tracebank.loop.tasks import load_tasks

__all__ = [
    "AlgorithmConfig",
    "DemoConfig",
    "DemoResult",
    "LocalRunners",
    "LoopError",
    "LoopUsageError",
    "NoSucceededRolloutsError",
    "RoundConfig",
    "RoundResult",
    "RoundTimeoutError",
    "ServerConfig",
    "StagesConfig",
    "WarehouseSupervisedFinetuning",
    "load_agent",
    "load_tasks",
    "next_model_path",
    "run_demo",
    "run_round",
    "serve_round",
]


def __getattr__(name: str) -> Any:
    if name == "WarehouseSupervisedFinetuning":
        from tracebank.loop import algorithm

        return algorithm.WarehouseSupervisedFinetuning
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
