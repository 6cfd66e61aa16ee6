"""The train stage: a standalone trainer for archived dataset versions.

`train(wh, config)` trains a LoRA adapter on one committed dataset version (Unsloth on
CUDA when it is installed, TRL + PEFT everywhere else) in a child process, and records
the run under ``warehouse/runs/<run_id>/``. `inspect_dataset` shows what a row trains on.
"""

from tracebank.train.config import TrainConfig
from tracebank.train.errors import TrainConfigError, TrainError
from tracebank.train.inspection import inspect_dataset
from tracebank.train.record import RunRecord
from tracebank.train.runner import train
from tracebank.train.runs import run_details, runs_table

__all__ = [
    "RunRecord",
    "TrainConfig",
    "TrainConfigError",
    "TrainError",
    "inspect_dataset",
    "run_details",
    "runs_table",
    "train",
]
