"""The serving loop: whole rounds (serve, proxy, roll out, collect, transform, train) and the demo.

With the CLI, the only package that imports several stages. Entries:
``run_round`` / ``serve_round`` (one round), ``WarehouseSupervisedFinetuning``
(the agentlightning Algorithm, built on first access: agentlightning is slow to
import), ``run_demo``; ``LocalRunners`` runs agentlightning's own runners.
"""

import os

from tracebank.core.lazy import lazy_exports

# LiteLLM (imported with agentlightning) otherwise fetches a price map from the internet at import
# time and stalls without network.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "tracebank.loop.config": (
            "AlgorithmConfig",
            "DemoConfig",
            "RoundConfig",
            "ServerConfig",
            "StagesConfig",
        ),
        "tracebank.loop.demo": (
            "DemoResult",
            "run_demo",
        ),
        "tracebank.loop.errors": (
            "LoopError",
            "LoopUsageError",
            "NoSucceededRolloutsError",
            "RoundTimeoutError",
        ),
        "tracebank.loop.result": ("RoundResult",),
        "tracebank.loop.round": (
            "run_round",
            "serve_round",
        ),
        "tracebank.loop.runners": (
            "LocalRunners",
            "load_agent",
        ),
        "tracebank.loop.servers": ("next_model_path",),
        "tracebank.loop.tasks": ("load_tasks",),
        "tracebank.loop.algorithm": ("WarehouseSupervisedFinetuning",),
    },
)
