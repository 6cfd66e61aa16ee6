"""The one allow-list of what a replayed or resumed record may decide (`warehouse/replay.py`)."""

from __future__ import annotations

import math

import pytest
from tracebank.train.config import TrainConfig
from tracebank.transform.config import Agl1Limits, PreferenceRules, TransformConfig
from tracebank.warehouse.replay import (
    TRAIN_REPLAYED,
    TRANSFORM_REPLAYED,
    defaults_of,
    replay_train,
    replay_transform,
)

TRAIN_DEFAULTS = defaults_of(TrainConfig)


def _planted_hyperparameters(**more):
    config = TrainConfig(dataset="qa@v1", base_model="/models/tiny", output="/models/out", learning_rate=1e-2)
    return {**config.to_dict(), **more}


def test_a_run_record_replays_what_shapes_the_model_and_names_what_it_may_not_decide():
    planted = _planted_hyperparameters(
        nnodes=2,
        node_rank=0,
        nproc_per_node=4,
        rdzv_endpoint="127.0.0.1:29400",
        overwrite=True,
        report_to=["wandb"],
        extra={"push_to_hub": True, "hub_model_id": "evil/model", "adam_beta2": 0.95, "adam_epsilon": "1e-8"},
    )
    replay = replay_train(planted, TRAIN_DEFAULTS)
    assert replay.settings["learning_rate"] == 1e-2 and replay.settings["dataset"] == "qa@v1"
    assert replay.settings["extra"] == {"adam_beta2": 0.95}  # a number; the string is not
    never = ("nnodes", "node_rank", "nproc_per_node", "rdzv_endpoint", "overwrite", "output", "report_to")
    assert not set(never) & replay.settings.keys()
    # node_rank 0 is the default: it did not matter, so it is not named
    assert replay.dropped == (
        "output",
        "overwrite",
        "report_to",
        "nproc_per_node",
        "nnodes",
        "rdzv_endpoint",
        "extra.push_to_hub",
        "extra.hub_model_id",
        "extra.adam_epsilon",
    )
    line = replay.dropped_line(ignore=("output",))
    assert line is not None and "\n" not in line and line.endswith("extra.hub_model_id, extra.adam_epsilon")


def test_a_record_of_defaults_drops_nothing_that_matters():
    replay = replay_train(_planted_hyperparameters(), TRAIN_DEFAULTS)
    assert replay.dropped == ("output",) and replay.dropped_line(ignore=("output",)) is None
    assert TrainConfig(**{**replay.settings, "output": "/x"}).validate().learning_rate == 1e-2


@pytest.mark.parametrize(
    "name, value",
    [
        ("attn_implementation", "kernels-community/flash-attn"),  # code from a hub repository
        ("learning_rate", math.inf),
        ("target_modules", [{"not": "a name"}]),
        ("seed", {"nested": 1}),
    ],
)
def test_an_allowed_setting_with_a_value_of_the_wrong_shape_is_dropped(name, value):
    assert name in TRAIN_REPLAYED
    replay = replay_train(_planted_hyperparameters(**{name: value}), TRAIN_DEFAULTS)
    assert name not in replay.settings and name in replay.dropped


def test_a_manifest_config_replays_its_rows_never_where_or_whether_to_build():
    config = TransformConfig(name="d", collections=("c1",), top_fraction=0.5, engine="ray", force=True)
    recorded = {**config.settings(), "address": "127.0.0.1:6379"}
    recorded.pop("agl1"), recorded.pop("preference")
    replay = replay_transform(recorded, defaults_of(TransformConfig, Agl1Limits, PreferenceRules))
    assert replay.settings["top_fraction"] == 0.5 and replay.settings["collections"] == ["c1"]
    assert not {"engine", "address", "force"} & replay.settings.keys()
    assert replay.dropped == ("force", "engine", "address")
    assert not {"engine", "address", "force", "extra"} & TRANSFORM_REPLAYED
