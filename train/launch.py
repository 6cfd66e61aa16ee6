"""``python -m tracebank.train.launch ranks|torchrun ...``: start the training child once per rank.

One node (``ranks N SPEC``): this launcher starts the N ranks itself. They meet in a
``torch.distributed.FileStore`` inside a folder only this user can open (``tempfile.mkdtemp``,
mode 0700), and gloo and NCCL bind loopback, so the run opens no socket another machine can
reach and offers no rendezvous another local user can join. torchrun's ``--standalone`` instead
served its c10d ``TCPStore`` on every interface, unauthenticated, and its rendezvous unpickles
what that store holds (issue 27).

Several nodes (``torchrun TORCHRUN_ARGS...``): torchrun (``torch.distributed.run``) with its c10d
rendezvous at ``--rdzv-endpoint``, whose network must be trusted.

Either way the launcher ends its process group when the tracebank process that started it is
gone, as the single child does. Each rank runs ``tracebank.train.child`` and ends when this
launcher is gone, so a killed ``tracebank train`` leaves no rank behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from types import FrameType
from typing import NoReturn

from tracebank.train.child import STORE_VARIABLE, end_with_parent

#: How long the other ranks get to stop after one failed, before they are killed.
STOP_GRACE_S = 5.0
POLL_S = 0.2


def rank_environment(rank: int, nproc: int, store: Path) -> dict[str, str]:
    """Rank ``rank``'s environment: torchrun's variables, the store, and loopback for every socket."""
    return {
        **os.environ,
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "GROUP_RANK": "0",
        "WORLD_SIZE": str(nproc),
        "LOCAL_WORLD_SIZE": str(nproc),
        STORE_VARIABLE: str(store),
        # gloo's pairs and NCCL's bootstrap listen on these interfaces (default: the hostname's address).
        "GLOO_SOCKET_IFNAME": "lo",
        "NCCL_SOCKET_IFNAME": "lo",
        # Nothing should read it (the group is initialised from the store); if anything does, loopback.
        "MASTER_ADDR": "127.0.0.1",
    }


def run_ranks(nproc: int, spec_path: str, private: Path) -> int:
    """Start ``nproc`` ranks of the training child, meeting in a store inside ``private``, wait for
    them, and return the run's exit code: 0 when all succeed, else the first failure's (the other
    ranks are stopped then)."""
    ranks: list[subprocess.Popen[bytes]] = []
    try:
        for rank in range(nproc):
            ranks.append(
                subprocess.Popen(
                    [sys.executable, "-P", "-m", "tracebank.train.child", spec_path],
                    env=rank_environment(rank, nproc, private / "store"),
                )
            )
        return _wait_for(ranks)
    finally:
        _stop(ranks)


def _wait_for(ranks: list[subprocess.Popen[bytes]]) -> int:
    while True:
        codes = [rank.poll() for rank in ranks]
        failed = [code for code in codes if code not in (None, 0)]
        if failed:
            return failed[0]
        if all(code == 0 for code in codes):
            return 0
        time.sleep(POLL_S)


def _stop(ranks: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM the ranks still running, SIGKILL those still there after the grace period."""
    alive = [rank for rank in ranks if rank.poll() is None]
    for rank in alive:
        rank.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for rank in alive:
        try:
            rank.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            rank.kill()
            rank.wait()


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # runs run_ranks' cleanup: the ranks stopped, the store removed


def exit_as(code: int) -> NoReturn:
    """Exit as the failed rank did: by its signal (so the parent can say "killed by SIGKILL"), or its code."""
    if code < 0:
        if -code != signal.SIGKILL:
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        code = 1  # not reached: the signal ends this process
    sys.exit(code)


def launch_ranks(nproc: int, spec_path: str) -> NoReturn:
    """One node: the ranks meet in a store inside a folder only this user can open, removed at the end."""
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    private = Path(tempfile.mkdtemp(prefix="tracebank-ranks-"))  # mode 0700
    remove_private = partial(shutil.rmtree, private, ignore_errors=True)
    end_with_parent(os.getppid(), before=remove_private)
    try:
        code = run_ranks(nproc, spec_path, private)
    finally:
        remove_private()
    exit_as(code)


def main(argv: list[str]) -> None:
    mode, rest = argv[0], argv[1:]
    if mode == "ranks":
        launch_ranks(int(rest[0]), rest[1])
    end_with_parent(os.getppid())
    from torch.distributed.run import main as torchrun

    torchrun(rest)


if __name__ == "__main__":
    main(sys.argv[1:])
