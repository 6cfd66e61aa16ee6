"""The training child: ``python -m train.child SPEC_JSON EVENT_FD``.

A separate process so the accelerator's memory is returned to the system when training
ends (vLLM serves the next round from the same GPU), and so a crash, an out-of-memory
kill or a timeout takes down only this process while the parent records the run as failed.
It reports to the parent as JSON lines on the file descriptor EVENT_FD; its stdout and
stderr go to the run's train.log.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from typing import Any


def _end_with_parent() -> None:
    """Get SIGTERM when the parent ends (Linux), so a child whose parent was killed (SIGKILL, OOM)
    does not train on unobserved; its run is shown as failed ("process gone")."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent ended before the call above
        sys.exit(1)


def main(argv: list[str]) -> int:
    spec_path, fd = argv[0], int(argv[1])
    _end_with_parent()
    channel = os.fdopen(fd, "w", buffering=1, encoding="utf-8")

    def emit(event: dict[str, Any]) -> None:
        channel.write(json.dumps(event, default=str) + "\n")
        channel.flush()

    with open(spec_path, encoding="utf-8") as fh:
        spec = json.load(fh)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    emit({"event": "started", "pid": os.getpid()})

    from tracebank.train.errors import TrainError
    from tracebank.train.recipe import SFTRecipe

    recipe = SFTRecipe(spec, emit)
    try:
        recipe.setup()
        stats = recipe.train()
        saved = recipe.save()
        emit({"event": "done", "stats": stats, "saved": saved})
        return 0
    except TrainError as exc:
        emit(
            {
                "event": "error",
                "kind": "train",
                "message": exc.message,
                "hint": exc.hint,
                "exit_code": exc.exit_code,
            }
        )
        return 3
    except BaseException as exc:
        traceback.print_exc()
        text = str(exc).strip().splitlines()
        emit(
            {"event": "error", "kind": "crash", "message": f"{type(exc).__name__}: {text[0] if text else ''}"}
        )
        return 1
    finally:
        recipe.cleanup()
        sys.stdout.flush()
        sys.stderr.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
