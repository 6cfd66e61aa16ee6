"""The train stage: a standalone trainer for archived dataset versions.

`train(wh, config)` trains a LoRA adapter on one committed dataset version (Unsloth on
CUDA when it is installed, TRL + PEFT everywhere else) in a child process, and records
the run under ``warehouse/runs/<run_id>/``.
"""

from tracebank.core.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "tracebank.train.config": ("TrainConfig",),
        "tracebank.train.errors": (
            "TrainConfigError",
            "TrainError",
        ),
        "tracebank.train.record": ("RunRecord",),
        "tracebank.train.runner": (
            "resume",
            "train",
        ),
        "tracebank.train.runs": (
            "run_details",
            "runs_table",
        ),
    },
)
