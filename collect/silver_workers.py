"""Silver builds of several collections side by side, in worker processes (one per core).

A build is single-threaded (Python + one DuckDB thread), so one process keeps one
core busy. Each worker is a fresh interpreter (``python -m`` this module): not a
fork, since DuckDB, Polars and Arrow start threads a fork would copy broken, and
not ``multiprocessing``'s spawn, which re-runs the caller's main script (a
script that builds silver at its top level would build again in every worker).

A worker reads collection ids, one a line, on stdin, builds and commits each
whole collection (exactly as in-process: files first, manifest last) and
answers each with a pickled ``(manifest, error, warnings)``. One collection is
in a worker's memory at a time. Ids are handed out in collection order; after a
failure no later id is handed out, the builds running finish, and the first
failure in collection order is raised, as building one after another would.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading
import warnings
from typing import IO, Any

from tracebank.collect.errors import CollectError
from tracebank.core import memory
from tracebank.core.errors import TracebankError
from tracebank.warehouse import layout
from tracebank.warehouse.backends import open_warehouse
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.records import SilverManifest

# (manifest or None, error parts or None, warning messages): a worker's answer for one collection.
Answer = tuple[SilverManifest | None, Any, list[Warning | str]]


def build_one(wh: Warehouse, collection_id: str, force: bool) -> SilverManifest:
    """Build (or reuse) one collection's silver cache in this process."""
    # Imported only to build: DuckDB's import alone is ~0.1 s of every warm `tracebank transform`.
    from tracebank.collect import silver

    try:
        return silver.build_silver(wh, collection_id, force=force)
    finally:
        memory.release()  # else each collection's peak starts from the last one's leftovers


def _error_parts(err: TracebankError) -> tuple[type[TracebankError], tuple[Any, ...], dict[str, Any]]:
    # An exception pickles only its args: that would lose the hint, and break subclasses
    # whose __init__ takes other arguments.
    return type(err), err.args, err.__dict__


def _rebuilt(parts: tuple[type[TracebankError], tuple[Any, ...], dict[str, Any]]) -> TracebankError:
    cls, args, attrs = parts
    err = Exception.__new__(cls)
    Exception.__init__(err, *args)
    err.__dict__.update(attrs)
    return err


def _answer(wh: Warehouse, collection_id: str, force: bool) -> Answer:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return build_one(wh, collection_id, force), None, [w.message for w in caught]
        except TracebankError as err:
            return None, _error_parts(err), [w.message for w in caught]


def _serve(location: str, force: bool) -> None:
    """The worker's loop: an id per line on stdin, a pickled answer each on the original stdout."""
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything a library prints goes to stderr, not into the answers
    memory.fix_mmap_threshold()
    wh = open_warehouse(location)
    for line in sys.stdin:
        pickle.dump(_answer(wh, line.strip(), force), answers)
        answers.flush()


class _Handout:
    """Collection ids in order to whichever worker is free; none past the first failure."""

    def __init__(self, todo: list[str]) -> None:
        self.todo = todo
        self.answers: dict[int, Answer | CollectError] = {}
        self._next = 0
        self._stop = len(todo)
        self._lock = threading.Lock()

    def take(self) -> int | None:
        with self._lock:
            if self._next >= self._stop:
                return None
            self._next += 1
            return self._next - 1

    def put(self, i: int, answer: Answer | CollectError) -> None:
        with self._lock:
            self.answers[i] = answer
            if isinstance(answer, CollectError) or answer[1] is not None:
                self._stop = min(self._stop, i + 1)


def _died(collection_id: str, code: int | None) -> CollectError:
    return CollectError(
        f"building the silver tables of collection {collection_id!r}: its worker process died "
        f"(exit code {code})",
        "out of memory? run the command again to build the caches still missing",
    )


def _drive(proc: subprocess.Popen[bytes], handout: _Handout) -> None:
    """One worker's feeder thread: hand it ids until none is left, collect its answers."""
    stdin: IO[bytes] = proc.stdin  # type: ignore[assignment]
    stdout: IO[bytes] = proc.stdout  # type: ignore[assignment]
    try:
        while (i := handout.take()) is not None:
            try:
                stdin.write(handout.todo[i].encode() + b"\n")
                stdin.flush()
                answer: Answer = pickle.load(stdout)
            except (OSError, EOFError, pickle.UnpicklingError):
                handout.put(i, _died(handout.todo[i], proc.wait()))
                return
            handout.put(i, answer)
    finally:
        stdin.close()
        proc.wait()


def build_in_workers(wh: Warehouse, todo: list[str], force: bool, n: int) -> list[SilverManifest]:
    """Build the silver caches of ``todo`` in ``n`` worker processes; their manifests in order."""
    for cid in todo:  # an id is a line of the workers' protocol: a listed folder name may be hostile
        layout.validate_name(cid, "collection id")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    command = [sys.executable, "-m", __name__, wh.location, "force" if force else "reuse"]
    handout = _Handout(todo)
    procs = [
        subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env) for _ in range(n)
    ]
    threads = [threading.Thread(target=_drive, args=(p, handout), daemon=True) for p in procs]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for p in procs:
            if p.poll() is None:  # only when the parent itself was interrupted
                p.kill()
                p.wait()
    built = []
    for i in range(len(todo)):
        answer = handout.answers[i]
        if isinstance(answer, CollectError):
            raise answer
        manifest, error, caught = answer
        for message in caught:
            warnings.warn(message, stacklevel=2)
        if error is not None:
            raise _rebuilt(error) from None
        assert manifest is not None
        built.append(manifest)
    return built


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2] == "force")
