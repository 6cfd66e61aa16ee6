"""Stores that are down, silent, flaky or have evicted spans (all real servers and sockets)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
import time

import pytest
from click.testing import CliRunner
from tracebank.collect import CollectConfig, StoreRequestError, StoreUnreachableError, collect
from tracebank.warehouse.query import run_sql
from tracebank.warehouse.storage import Storage

from tests.cli_args import cli_args
from tests.collect.helpers import ROOT, DroppingProxy, cli_env, fill_random, fill_url, stored_span_rows
from tests.fixtures.store_server import free_port, wait_healthy
from tracebank.cli.main import cli


def test_unreachable_store_is_one_line_naming_the_url_and_fast(wh, warehouse_position):
    url = f"http://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    out = CliRunner().invoke(cli, cli_args(wh.root, warehouse_position, "collect", "--store", url))
    assert time.monotonic() - t0 < 5
    assert out.exit_code == 1
    assert out.stderr == (
        f"Error: cannot reach the store at {url} (connection refused) "
        "(is `agl store` running there? check --store)\n"
    )
    assert Storage(wh).collections() == []


def test_silent_store_times_out_quickly(wh):
    with socket.socket() as listener:  # accepts connections (backlog), never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        t0 = time.monotonic()
        with pytest.raises(
            StoreUnreachableError,
            match=f"cannot reach the store at {url} "
            r"\(no answer within 0.5s; pass --connect-timeout SECONDS to wait longer\)",
        ):
            collect(url, wh, CollectConfig(connect_timeout_s=0.5))
        assert time.monotonic() - t0 < 3


@pytest.fixture(scope="module")
def small_store(store_url):
    fill_url(store_url, 40, seed=11)
    return store_url


def _store_port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def test_dropped_connections_are_retried(small_store, wh):
    proxy = DroppingProxy(_store_port(small_store), drops=6)
    with proxy.running() as url:
        result = collect(url, wh, CollectConfig(retries=3, backoff_s=0.01))
    assert proxy.dropped == 6
    assert result.counts["rollouts"] == 40 and result.counts["spans"] == 40 * 7
    assert run_sql(wh, "SELECT count(*) n, count(DISTINCT span_id) d FROM spans").to_pylist() == [
        {"n": 280, "d": 280}
    ]


def test_failures_beyond_the_retries_stop_the_run_with_nothing_committed(small_store, wh):
    proxy = DroppingProxy(_store_port(small_store), drops=10_000)
    with proxy.running() as url:
        t0 = time.monotonic()
        with pytest.raises(StoreRequestError, match=f"query_spans failed at {url} after 3 tries") as err:
            collect(url, wh, CollectConfig(retries=2, backoff_s=0.01))
        assert time.monotonic() - t0 < 10
    assert "\n" not in err.value.one_line()
    assert Storage(wh).collections() == []
    assert run_sql(wh, "SELECT count(*) n FROM spans").to_pylist() == [{"n": 0}]


# Eviction ------------------------------------------------------------------------------

# Small enough that 12 rollouts of 7 spans overflow it and the oldest lose their spans.
EVICT_BYTES = 60_000


@pytest.fixture
def evicting_store_url(tmp_path):
    """A real LightningStoreServer over an InMemoryLightningStore with a tiny eviction threshold."""
    port = free_port()
    log = open(tmp_path / "evicting-store.log", "wb")
    cmd = [sys.executable, "-m", "tests.collect.evicting_store", str(port), str(EVICT_BYTES)]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=cli_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc=proc)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def test_evicted_rollouts_are_recorded_not_fatal_over_http(evicting_store_url, wh):
    ids = fill_url(evicting_store_url, 12, seed=5)
    result = collect(evicting_store_url, wh, CollectConfig())
    evicted = {e["rollout_id"] for e in result.evicted}
    assert 0 < len(evicted) < 12
    assert result.counts["evicted"] == len(evicted)
    assert result.counts["rollouts"] == 12 - len(evicted)
    manifest = Storage(wh).collections()[0][1].to_json()
    assert {e["rollout_id"] for e in manifest["evicted"]} == evicted
    assert all("evicted" in e["reason"] and e["attempt_id"] for e in manifest["evicted"])
    assert {r for r, _ in ids} - evicted == set(
        run_sql(wh, "SELECT DISTINCT rollout_id FROM spans").column("rollout_id").to_pylist()
    )
    assert result.summary().endswith(f"{len(evicted)} evicted in {result.seconds['total']:.1f}s")
    again = collect(evicting_store_url, wh, CollectConfig())
    assert not again.committed and again.counts["skipped"] == 12


def test_in_process_store_object_with_eviction(wh):
    from agentlightning import InMemoryLightningStore

    store = InMemoryLightningStore(eviction_memory_threshold=EVICT_BYTES)
    ids = asyncio.run(fill_random(store, 12, seed=9))
    result = collect(store, wh, CollectConfig())
    assert result.store == "in-process"
    assert 0 < result.counts["evicted"] < 12
    assert result.counts["rollouts"] + result.counts["evicted"] == 12
    manifest = Storage(wh).collections()[0][1].to_json()
    assert manifest["store_url"] == "in-process"
    kept = {r for r, _ in ids} - {e["rollout_id"] for e in manifest["evicted"]}
    assert set(run_sql(wh, "SELECT DISTINCT rollout_id FROM spans").column("rollout_id").to_pylist()) == kept
    assert not collect(store, wh, CollectConfig()).committed


def test_in_process_store_round_trip(wh):
    from agentlightning import InMemoryLightningStore, Span
    from tracebank.warehouse.bronze import span_dict_from_row

    store = InMemoryLightningStore()
    ids = asyncio.run(fill_random(store, 5, seed=4))

    async def everything():
        return {s.span_id: s for rid, aid in ids for s in (await store.query_spans(rid, aid)).items}

    expected = asyncio.run(everything())
    collect(store, wh, CollectConfig(redact=False))
    rows = stored_span_rows(wh)
    assert {r["span_id"]: Span.model_validate(span_dict_from_row(r)) for r in rows} == expected


def test_collect_from_inside_a_running_loop(wh):
    from agentlightning import InMemoryLightningStore

    async def main():
        store = InMemoryLightningStore()
        await fill_random(store, 3, seed=1)
        return collect(store, wh, CollectConfig())  # a notebook calls the sync API like this

    assert asyncio.run(main()).counts["rollouts"] == 3


def test_not_a_store_is_a_usage_error(wh):
    from tracebank.collect.errors import CollectUsageError

    with pytest.raises(CollectUsageError, match="cannot collect from a dict"):
        collect({}, wh, CollectConfig())


class HealthyThenSilentStore:
    """A loopback HTTP server that answers the health check and then accepts every other request
    and never answers it: a store stuck after start-up (issue 12: 316 s to fail)."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.held: list[socket.socket] = []
        self.requests = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        while data := conn.recv(65536):
            if data.startswith(b"GET /v1/agl/health"):
                conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n{"status":"ok"}')
                continue
            self.requests += 1
            self.held.append(conn)  # read, never answered, never closed
            return

    def __enter__(self) -> HealthyThenSilentStore:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.listener.close()
        for conn in self.held:
            conn.close()


@pytest.fixture
def silent_store():
    import agentlightning.store.client_server  # noqa: F401 - its import (seconds) is not the wait

    with HealthyThenSilentStore() as store:
        yield store


def test_store_that_accepts_and_never_answers_fails_in_seconds_with_defaults(wh, silent_store):
    t0 = time.monotonic()
    with pytest.raises(StoreRequestError) as err:
        collect(silent_store.url, wh, CollectConfig())
    took = time.monotonic() - t0
    assert err.value.one_line() == (
        f"the store at {silent_store.url} sent no answer to query_rollouts within 10s (2 tries) "
        "(is the store stuck or overloaded? pass --read-timeout SECONDS to wait longer)"
    )
    assert 20 <= took < 40, took  # two waits of the default read timeout (was 316 s)
    assert silent_store.requests == 2
    assert Storage(wh).collections() == []


def test_read_timeout_option_waits_as_long_as_asked(wh, silent_store):
    url = silent_store.url
    t0 = time.monotonic()
    out = CliRunner().invoke(
        cli, ["--warehouse", str(wh.root), "collect", "--store", url, "--read-timeout", "1.5"]
    )
    took = time.monotonic() - t0
    assert out.exit_code == 1
    assert out.stderr == (
        f"Error: the store at {url} sent no answer to query_rollouts within 1.5s (2 tries) "
        "(is the store stuck or overloaded? pass --read-timeout SECONDS to wait longer)\n"
    )
    assert 3 <= took < 15, took


def test_timeouts_must_be_positive(wh):
    out = CliRunner().invoke(
        cli,
        ["--warehouse", str(wh.root), "collect", "--store", "http://127.0.0.1:9", "--connect-timeout", "0"],
    )
    assert out.exit_code == 2
    assert "Invalid value for '--connect-timeout': 0.0 is not in the range x>0." in out.stderr
