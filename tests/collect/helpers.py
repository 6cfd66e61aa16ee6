"""Helpers of the collect tests: filling real stores, running the real CLI, a faulty TCP hop."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tracebank.warehouse.storage import Storage

from tests.fixtures.fill import add_rollout
from tests.fixtures.proxy_spans import random_rollout_spans

ROOT = Path(__file__).resolve().parents[2]
TRACEBANK = [sys.executable, "-m", "tracebank.cli.main"]


def fill_spool(folder: Path, n: int, prefix: str = "r") -> list[str]:
    """``n`` succeeded 1.0 rollouts (three large model calls each) in the spool ``folder``, as the
    hook writes them; their ids, ``<prefix>0000`` on."""
    from tracebank.collect.agl1_hook import spool_entry, write_entry

    from tests.fixtures.agl1_server import model_request

    events = [
        {
            "event_type": "model_request",
            "rollout_id": "x",
            "attempt_id": "0",
            "timestamp": 1.0 + i,
            "data": data,
        }
        for i, data in enumerate(model_request(list(range(2000)), list(range(300))) for _ in range(3))
    ]
    ids = []
    for i in range(n):
        rid = f"{prefix}{i:04d}"
        rollout = {
            "rollout_id": rid,
            "is_train": True,
            "input": {"i": i},
            "status": {"state": "succeeded", "last_attempt_id": "0"},
        }
        write_entry(folder, spool_entry(rollout, {"0": events}, "hook", True), durable=False)
        ids.append(rid)
    return ids


def client(url: str) -> Any:
    from agentlightning.store.client_server import LightningStoreClient

    return LightningStoreClient(url)


async def fill_random(
    store: Any, n: int, seed: int = 0, concurrency: int = 16, n_calls: int = 2
) -> list[tuple[str, str]]:
    """``n`` succeeded train rollouts of ``n_calls`` proxied calls and a reward each."""
    rng = random.Random(seed)
    sem = asyncio.Semaphore(concurrency)

    async def one() -> tuple[str, str]:
        async with sem:
            return await add_rollout(
                store, lambda r, a: random_rollout_spans(r, a, rng, n_calls=n_calls, reward=rng.random())
            )

    return list(await asyncio.gather(*[one() for _ in range(n)]))


def fill_url(url: str, n: int, seed: int = 0, n_calls: int = 2) -> list[tuple[str, str]]:
    async def run() -> list[tuple[str, str]]:
        c = client(url)
        try:
            return await fill_random(c, n, seed, n_calls=n_calls)
        finally:
            await c.close()

    return asyncio.run(run())


def store_spans(url: str, rollout_id: str, attempt_id: str) -> list[Any]:
    async def run() -> list[Any]:
        c = client(url)
        try:
            return list((await c.query_spans(rollout_id, attempt_id)).items)
        finally:
            await c.close()

    return asyncio.run(run())


def cli_env() -> dict[str, str]:
    return {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`tracebank ARGS` in a subprocess of its own."""
    return subprocess.run(
        [*TRACEBANK, *args], capture_output=True, text=True, env=cli_env(), cwd=ROOT, timeout=timeout
    )


def start_cli(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*TRACEBANK, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
        cwd=ROOT,
    )


def receive_cli(root: Path, send: Callable[[str], Any]) -> tuple[Any, subprocess.CompletedProcess[str]]:
    """`tracebank receive` on a free loopback port with batches held to the end; ``send(url)`` exports
    to its /v1/traces, then SIGTERM commits what it holds: what ``send`` returned, and the run."""
    from tests.fixtures.store_server import free_port

    port = free_port()
    proc = start_cli("-w", str(root), "receive", "--port", str(port), "--batch-seconds", "600")
    try:
        assert proc.stdout is not None
        assert "receiving OTLP traces" in proc.stdout.readline()
        sent = send(f"http://127.0.0.1:{port}/v1/traces")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return sent, subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


class DroppingProxy:
    """A TCP hop to a real store that cuts the first ``drops`` connections whose first request
    searches spans: the client sees a real disconnect, as when a store restarts or a load
    balancer resets a connection."""

    def __init__(self, target_port: int, drops: int, match: bytes = b"/spans/search") -> None:
        self.target_port = target_port
        self.drops = drops
        self.match = match
        self.dropped = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = await reader.read(65536)
        if self.match in first and self.dropped < self.drops:
            self.dropped += 1
            writer.transport.abort()  # RST: the client's request dies mid-flight
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        up_writer.write(first)
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def serve() -> None:
            self._stop = asyncio.Event()
            server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
            self.port = server.sockets[0].getsockname()[1]
            self._ready.set()
            async with server:
                await self._stop.wait()
            pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

        self._loop.run_until_complete(serve())
        self._loop.close()

    @contextmanager
    def running(self) -> Iterator[str]:
        self._thread.start()
        self._ready.wait(10)
        try:
            yield f"http://127.0.0.1:{self.port}"
        finally:
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(10)


def wait_for(predicate: Callable[[], bool], timeout: float, interval: float = 0.005) -> bool:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


def stored_span_rows(wh: Any) -> list[dict[str, Any]]:
    """The committed span rows exactly as stored (epoch floats; the SQL views show UTC timestamps)."""
    from tracebank.warehouse.storage import read_table

    paths = [
        p
        for folder, manifest in Storage(wh).collections()
        for p in Storage(wh).files_of(folder, manifest, "spans")
    ]
    return read_table(paths).to_pylist()
