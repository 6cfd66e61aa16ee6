"""The training child: ``python -m train.child SPEC_JSON``.

A separate process so the accelerator's memory is returned to the system when training
ends (vLLM serves the next round from the same GPU), and so a crash, an out-of-memory
kill or a timeout takes down only this process while the parent records the run as failed.
It reads its instructions from a :class:`~tracebank.train.spec.ChildSpec` file and reports to the
parent with the typed events of `core.events`, one JSON line each (``to_dict``) into the FIFO the
spec names (``events``); its stdout
and stderr go to the run's train.log. With several ranks every rank runs this module and only
each node's local rank 0 reports (its node's parent reads the FIFO). On one node the ranks
initialise their process group themselves (:func:`join_local_ranks`).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from tracebank.core.events import ChildDone, ChildFailed, ChildStarted, Event

#: Set to 1 to let the training child import vLLM (tracebank's training never uses it).
ALLOW_VLLM_VARIABLE = "TRACEBANK_TRAIN_ALLOW_VLLM"


def hide_vllm() -> None:
    """Make vLLM look absent to this process.

    ``import unsloth`` probes for vLLM and imports it when installed (seconds of start-up
    and memory for an engine the child never starts). With ``sys.modules["vllm"] = None``
    ``importlib.util.find_spec("vllm")`` answers None and ``import vllm`` fails at once.
    """
    if os.environ.get(ALLOW_VLLM_VARIABLE) != "1" and "vllm" not in sys.modules:
        sys.modules["vllm"] = None  # type: ignore[assignment]


def end_with_parent(
    parent: int, poll_s: float = 1.0, before: Callable[[], None] = lambda: None
) -> threading.Thread:
    """Stop this child's whole process group when ``parent`` is gone (calling ``before`` first).

    The child runs in a session of its own (so Ctrl-C in the terminal reaches only the
    parent, which stops it cleanly); a parent killed outright (SIGKILL, or a SIGTERM from
    ``timeout``) would otherwise leave it training on the GPU with nobody to report to.
    """

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        before()
        os.killpg(os.getpgrp(), signal.SIGKILL)

    thread = threading.Thread(target=watch, name="end-with-parent", daemon=True)
    thread.start()
    return thread


#: The FileStore file the ranks of one node initialise their process group from (set by train.launch).
STORE_VARIABLE = "TRACEBANK_RANKS_STORE"
#: transformers' default ``ddp_timeout``: how long a collective waits for a slow rank.
COLLECTIVE_TIMEOUT_S = 1800


def join_local_ranks() -> None:
    """Initialise the process group of a one-node run from the launcher's private FileStore.

    Done before transformers asks accelerate for its state: accelerate's ``PartialState`` uses a
    default group that already exists, so it never reads MASTER_ADDR / MASTER_PORT and no TCP
    store is started. On CUDA both NCCL (the GPUs) and gloo (objects and CPU tensors, as
    accelerate adds for FSDP's full state dict) are set up. Under torchrun (several nodes) the
    store variable is absent and accelerate joins torchrun's rendezvous as before.
    """
    store = os.environ.get(STORE_VARIABLE)
    if not store:
        return
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    backend = "gloo"
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        backend = "cuda:nccl,cpu:gloo"
    dist.init_process_group(
        backend,
        init_method=f"file://{store}",
        rank=int(os.environ["RANK"]),
        world_size=int(os.environ["WORLD_SIZE"]),
        timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S),
    )


def _channel(events: str) -> Callable[[Event], None]:
    """The event writer of this process: local rank 0 writes into the FIFO, other ranks drop events."""
    if int(os.environ.get("LOCAL_RANK", "0")) != 0:
        return lambda event: None
    channel = open(events, "w", buffering=1, encoding="utf-8")  # noqa: SIM115 (open until exit)

    def emit(event: Event) -> None:
        channel.write(json.dumps(event.to_dict(), default=str) + "\n")
        channel.flush()

    return emit


def main(argv: list[str]) -> int:
    spec_path = argv[0]
    end_with_parent(os.getppid())
    hide_vllm()
    from tracebank.train.errors import TrainError
    from tracebank.train.spec import ChildSpec

    try:
        spec = ChildSpec.read(Path(spec_path))
    except TrainError as exc:  # no FIFO to report on: the spec names it
        print(exc.one_line(), file=sys.stderr)
        return exc.exit_code
    emit = _channel(spec.events)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    emit(ChildStarted(pid=os.getpid()))

    from tracebank.train.dpo import DPORecipe
    from tracebank.train.recipe import SFTRecipe

    recipe = (DPORecipe if spec.config.method == "dpo" else SFTRecipe)(spec, emit)
    try:
        join_local_ranks()
        recipe.setup()
        stats = recipe.train()
        saved = recipe.save()
        emit(ChildDone(stats=stats, saved=saved))
        return 0
    except TrainError as exc:
        print(f"rank {os.environ.get('RANK', '0')}: {exc.one_line()}", file=sys.stderr)
        emit(ChildFailed(cause="train", message=exc.message, hint=exc.hint, exit_code=exc.exit_code))
        return 3
    except BaseException as exc:
        traceback.print_exc()
        text = str(exc).strip().splitlines()
        emit(ChildFailed(cause="crash", message=f"{type(exc).__name__}: {text[0] if text else ''}"))
        return 1
    finally:
        recipe.cleanup()
        sys.stdout.flush()
        sys.stderr.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
