"""The one renderer: exact output as timed plain lines and as live bars."""

from __future__ import annotations

import io
import itertools
import re

from tracebank.core import events as ev

from tracebank.cli.progress import Progress

ROUND = [
    ev.IterationStarted(0, "m/version_0", "m/version_1"),
    ev.ServerStarting("m/version_0", "cpu", None),
    ev.RolloutProgress(1, 2, 1, 0),
    ev.RolloutProgress(2, 2, 1, 1),
    ev.RolledOut({"succeeded": 1, "failed": 1}, 7, 3.25),
    ev.TrainBegin(max_steps=2),
    ev.MetricLogged(ev.Metric(step=1, split="train", loss=2.5, epoch=0.5, learning_rate=1e-3)),
    ev.MetricLogged(ev.Metric(step=2, split="train", loss=2.25, epoch=1.0)),
    ev.MetricLogged(ev.Metric(step=2, split="eval", loss=2.0)),
    ev.ModelSaved("lora"),
    ev.Trained("r1", "m/version_1", 0),
]


def test_plain_lines_carry_the_elapsed_time():
    out = io.StringIO()
    ticks = itertools.count(100.0, 1.5)
    progress = Progress(out, clock=lambda: next(ticks))
    for event in ROUND:
        progress(event)
    progress.close()
    assert out.getvalue() == (
        "[    1.5s] [iter 0] serve m/version_0 -> train m/version_1\n"
        "[    3.0s] [iter 0] starting the cpu model server\n"
        "[    4.5s] [iter 0] rollouts 1/2 (1 ok)\n"
        "[    6.0s] [iter 0] rollouts 2/2 (1 ok, 1 failed)\n"
        "[    7.5s] [iter 0] rollouts done in 3.2s: 1 failed, 1 succeeded; 7 spans in the store; "
        "model server stopped\n"
        "[    9.0s] [iter 0] step 1/2  epoch 0.50  loss 2.5000  lr 1.00e-03\n"
        "[   10.5s] [iter 0] step 2/2  epoch 1.00  loss 2.2500\n"
        "[   12.0s] [iter 0] eval at step 2/2  eval_loss 2.0000\n"
        "[   13.5s] [iter 0] saved lora\n"
        "[   15.0s] [iter 0] run r1 succeeded: m/version_1\n"
    )


def test_on_a_terminal_rollouts_and_steps_are_bars():
    out = io.StringIO()
    progress = Progress(out, live=True)
    for event in ROUND:
        progress(event)
    progress.close()
    bar = "\u2501" * 40
    assert re.fullmatch(
        "\n".join(
            [
                re.escape("[iter 0] serve m/version_0 -> train m/version_1"),
                re.escape("[iter 0] starting the cpu model server"),
                f"rollouts {bar} 2/2 1 ok, 1 failed \\d:\\d\\d:\\d\\d",
                re.escape(
                    "[iter 0] rollouts done in 3.2s: 1 failed, 1 succeeded; 7 spans in the store; "
                    "model server stopped"
                ),
                f"train steps {bar} 2/2 loss 2.2500 \\d:\\d\\d:\\d\\d",
                re.escape("[iter 0] eval at step 2/2  eval_loss 2.0000"),
                re.escape("[iter 0] saved lora"),
                re.escape("[iter 0] run r1 succeeded: m/version_1"),
            ]
        )
        + "\n",
        out.getvalue(),
    ), out.getvalue()


def test_events_round_trip_through_the_wire_format():
    for event in ROUND:
        assert ev.event_from_dict(event.to_dict()) == event
    assert ev.event_from_dict({"event": "done", "stats": {}}) is None


def test_collect_and_transform_events_render_and_a_planted_holder_is_shown_not_obeyed():
    """A collect's bar shows only on a terminal; whom it waits for comes from a claim file a
    co-worker may have written, so its control characters are shown, never obeyed."""
    out = io.StringIO()
    ticks = itertools.count(0.0, 0.5)
    progress = Progress(out, clock=lambda: next(ticks))
    progress(ev.CollectProgress(3, 10))
    progress(ev.WaitingForWarehouse("collect (pid 7 on \x1b]0;owned\x07host)"))
    progress(ev.SilverBuilt("c1", "2 llm calls"))
    progress(ev.EnvironmentBuild("$ uv pip install vllm"))
    progress.close()
    assert out.getvalue() == (
        "[    0.5s] waiting for collect (pid 7 on ␛]0;owned␇host) to finish with this warehouse\n"
        "[    1.0s] silver of c1: 2 llm calls\n"
        "[    1.5s] $ uv pip install vllm\n"
    )
