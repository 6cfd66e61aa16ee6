"""The training child's events: each one's wire form reads back as itself; a malformed one reads as None."""

from __future__ import annotations

import json

import pytest
from tracebank.core import events as ev

CHILD_EVENTS = [
    ev.ChildStarted(pid=4242),
    ev.ModelLoaded(
        backend="trl",
        resolved={"backend": "trl", "device": "cpu", "bf16": False},
        trainable_params=10,
        total_params=100,
        trainable_percent=10.0,
        note="auto chose TRL+PEFT",
        pad_token_id=3,
    ),
    ev.TrainBegin(max_steps=24, epochs=6.0),
    ev.MetricLogged(ev.Metric(step=1, split="train", loss=2.5, epoch=0.25, rewards_margin=0.5)),
    ev.CheckpointSaved(step=4),
    ev.ModelSaved(save="lora", extra={"files": "adapter_model.safetensors + adapter_config.json"}),
    ev.ChildDone(
        stats={"steps": 24, "best_checkpoint": {"step": 20, "eval_loss": 0.1}}, saved={"save": "lora"}
    ),
    ev.ChildFailed(cause="train", message="bad data", hint="fix it", exit_code=2),
    ev.ChildFailed(cause="crash", message="RuntimeError: boom"),
]


@pytest.mark.parametrize("event", CHILD_EVENTS, ids=lambda e: type(e).__name__)
def test_every_child_event_round_trips_through_its_json_line(event):
    line = json.dumps(event.to_dict())
    assert ev.event_from_dict(json.loads(line)) == event


@pytest.mark.parametrize(
    "data",
    [
        [1, 2],
        "loaded",
        None,
        {"event": "no-such-event"},
        {"event": "loaded", "backend": "trl"},  # required fields missing
        {"event": "error", "message": "no cause"},
        {"stats": {}},
    ],
)
def test_what_is_no_known_event_reads_as_none(data):
    assert ev.event_from_dict(data) is None
