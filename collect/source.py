"""A client of the 0.3 store a ``sources.StoreSource`` names: a URL (through LightningStoreClient)
or a LightningStore object.

Both are driven through the same LightningStore methods; this module adds what
the client leaves to its caller: a fast reachability check, retries with
backoff that collect controls (the client's own retry and health-probe
schedules are switched off so a dead store fails in seconds, not minutes), and
telling an evicted rollout apart from a transient failure.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

from tracebank.collect import fastjson
from tracebank.collect.config import CollectConfig
from tracebank.collect.errors import (
    CollectUsageError,
    SpansEvictedError,
    StoreRequestError,
    StoreUnreachableError,
)
from tracebank.collect.redact import without_credentials
from tracebank.core.errors import first_line

T = TypeVar("T")

HEALTH_PATH = "/v1/agl/health"
SPANS_SEARCH_PATH = "/v1/agl/spans/search"
_EVICTED = re.compile(r"(?i)evicted|expired")
_JSON_HEADERS = {"Content-Type": "application/json"}


def check_url(url: str) -> str:
    """``url`` without a trailing slash, or a CollectUsageError saying what a store URL looks like."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CollectUsageError(
            f"invalid store URL {url!r}", "use http://HOST:PORT, e.g. http://127.0.0.1:4747"
        )
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise CollectUsageError(f"invalid port in store URL {url!r}", "use http://HOST:PORT") from None
    return url.strip().rstrip("/")


def describe_store(store: Any) -> str:
    """A store URL, normalised, or ``in-process`` for a LightningStore object; CollectUsageError
    for anything else."""
    if isinstance(store, str):
        return check_url(store)
    if not hasattr(store, "query_spans") or not hasattr(store, "query_rollouts"):
        raise CollectUsageError(
            f"cannot collect from a {type(store).__name__}",
            "pass a store URL or an agentlightning LightningStore",
        )
    return "in-process"


class Transient(Exception):
    """A failure worth retrying (connection refused/reset, timeout, 408/429/5xx)."""


class StoreClient:
    """One store, as collect talks to it."""

    def __init__(self, store: Any, description: str, config: CollectConfig, url: str | None = None) -> None:
        self.store = store
        self.description = without_credentials(description)  # recorded in the manifest, shown in errors
        self.url = url
        self.config = config
        self._owns_store = url is not None
        self._http: Any = None  # aiohttp.ClientSession of the span queries, opened on first use

    @classmethod
    async def open(cls, source: Any, config: CollectConfig) -> StoreClient:
        """A client of a store URL (checked for health first) or of a LightningStore object."""
        description = describe_store(source)
        if not isinstance(source, str):
            return cls(source, description, config)
        await check_store_health(description, config.connect_timeout_s)
        from agentlightning.store.client_server import LightningStoreClient

        client = LightningStoreClient(
            description,
            retry_delays=(),  # our retries, see _with_retries
            health_retry_delays=(),  # no background health probing between them
            request_timeout=config.read_timeout_s,
            connection_timeout=config.connect_timeout_s,
        )
        return cls(client, description, config, url=description)

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
        if self._owns_store:
            await self.store.close()

    # Queries ----------------------------------------------------------------------

    async def rollouts_page(self, offset: int) -> tuple[list[Any], int]:
        """One page of rollouts matching the status / id filters, oldest first, and the total."""
        cfg = self.config

        async def call() -> Any:
            return await self.store.query_rollouts(
                status_in=list(cfg.statuses),
                rollout_id_in=list(cfg.rollout_ids) or None,
                sort_by="start_time",
                sort_order="asc",
                limit=cfg.page_size,
                offset=offset,
            )

        result = await self._with_retries(call, "query_rollouts")
        return list(result.items), int(result.total)

    async def attempts(self, rollout_id: str) -> list[Any]:
        """Every attempt of a rollout, in sequence order."""
        result = await self._with_retries(
            lambda: self.store.query_attempts(rollout_id, sort_by="sequence_id"), "query_attempts"
        )
        return list(result.items)

    async def latest_attempt(self, rollout_id: str) -> Any | None:
        return await self._with_retries(
            lambda: self.store.get_latest_attempt(rollout_id), "get_latest_attempt"
        )

    async def spans(self, rollout_id: str, attempt_id: str) -> tuple[list[dict[str, Any]], bool]:
        """Span dicts of one attempt in sequence order, and whether they are plain JSON values
        (see :func:`collect.fastjson.loads`); SpansEvictedError when the store dropped them."""
        if self.url is not None:
            # The client's query_spans validates every item into a Span, and the archive needs
            # dicts again: post the very request it sends and take the server's JSON items as
            # they are (exactly what the client would validate), parsed from the raw bytes.
            body = fastjson.dumps(
                {
                    "rollout_id": rollout_id,
                    "attempt_id": attempt_id,
                    "limit": -1,
                    "offset": 0,
                    "filter_logic": "and",
                    "sort_by": "sequence_id",
                    "sort_order": "asc",
                }
            )
            raw = await self._with_retries(
                lambda: self._post(SPANS_SEARCH_PATH, body),
                "query_spans",
                rollout_id=rollout_id,
                attempt_id=attempt_id,
            )
            data, plain = fastjson.loads(raw)
            return list(data["items"]), plain
        result = await self._with_retries(
            lambda: self.store.query_spans(rollout_id, attempt_id, sort_by="sequence_id"),
            "query_spans",
            rollout_id=rollout_id,
            attempt_id=attempt_id,
        )
        return [span.model_dump() for span in result.items], False

    async def _post(self, path: str, body: bytes) -> bytes:
        """POST a JSON body to the store; the answer's raw bytes (ClientResponseError on >= 400)."""
        import aiohttp

        if self._http is None or self._http.closed:
            # One session per run with the client's timeouts; a keep-alive connection per
            # query in flight, as the client's own session would hold.
            # No total: a large answer may take long as long as bytes keep coming.
            timeout = aiohttp.ClientTimeout(
                total=None,
                sock_connect=self.config.connect_timeout_s,
                sock_read=self.config.read_timeout_s,
            )
            self._http = aiohttp.ClientSession(timeout=timeout)
        async with self._http.post(f"{self.url}{path}", data=body, headers=_JSON_HEADERS) as resp:
            resp.raise_for_status()
            return await resp.read()

    # Retries ----------------------------------------------------------------------

    async def _with_retries(
        self,
        call: Callable[[], Awaitable[T]],
        what: str,
        rollout_id: str | None = None,
        attempt_id: str | None = None,
    ) -> T:
        cfg = self.config
        last: BaseException | None = None
        timeouts = 0
        for attempt in range(cfg.retries + 1):
            if attempt:
                delay = cfg.backoff_s * (2 ** (attempt - 1))
                await asyncio.sleep(delay * (0.5 + random.random()))
            try:
                return await call()
            except TimeoutError as exc:  # aiohttp's connect and read timeouts are TimeoutErrors
                timeouts += 1
                if timeouts > 1 or attempt == cfg.retries:
                    raise self._timed_out(exc, what, attempt + 1) from exc
                last = exc
                continue
            except Exception as exc:  # classified below; anything unknown is final
                kind = await self._classify(exc, rollout_id, attempt_id)
                if kind == "evicted":
                    raise SpansEvictedError(
                        f"spans of rollout {rollout_id} were evicted by the store: {_describe(exc)}"
                    ) from exc
                if kind == "final":
                    raise StoreRequestError(f"{what} failed at {self.description}: {_describe(exc)}") from exc
                last = exc
        raise StoreRequestError(
            f"{what} failed at {self.description} after {cfg.retries + 1} tries: {_describe(last)}",
            "is the store overloaded or restarting? rerun collect; it resumes where it stopped",
        ) from last

    def _timed_out(self, exc: TimeoutError, what: str, tries: int) -> StoreRequestError:
        """A store that took too long: one line saying which wait ran out and how to lengthen it."""
        import aiohttp

        cfg = self.config
        tried = "1 try" if tries == 1 else f"{tries} tries"
        if isinstance(exc, aiohttp.ConnectionTimeoutError):
            return StoreRequestError(
                f"could not connect to the store at {self.description} within {cfg.connect_timeout_s:g}s "
                f"({what}, {tried})",
                "is the store overloaded? pass --connect-timeout SECONDS to wait longer",
            )
        return StoreRequestError(
            f"the store at {self.description} sent no answer to {what} within {cfg.read_timeout_s:g}s "
            f"({tried})",
            "is the store stuck or overloaded? pass --read-timeout SECONDS to wait longer",
        )

    async def _classify(self, exc: BaseException, rollout_id: str | None, attempt_id: str | None) -> str:
        """``evicted``, ``transient`` or ``final``."""
        import aiohttp

        if isinstance(exc, RuntimeError) and _EVICTED.search(str(exc)):
            return "evicted"  # in-process InMemoryLightningStore
        if isinstance(exc, aiohttp.ClientResponseError):
            if exc.status >= 500:
                # The server turns the store's RuntimeError into a bare 500 and the client
                # drops the body; ask again to read why before deciding to retry.
                if rollout_id is not None and self.url is not None:
                    body = await _spans_error_body(
                        self.url, rollout_id, attempt_id, self.config.read_timeout_s
                    )
                    if _EVICTED.search(body):
                        return "evicted"
                return "transient"
            return "transient" if exc.status in (408, 425, 429) else "final"
        if isinstance(
            exc, aiohttp.ClientConnectionError | asyncio.TimeoutError | ConnectionError | Transient
        ):
            return "transient"
        return "final"


def _describe(exc: BaseException | None) -> str:
    return "unknown error" if exc is None else first_line(exc, with_type=True)


async def check_store_health(url: str, timeout_s: float) -> None:
    """StoreUnreachableError unless the store at ``url`` answers its health check in time."""
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url + HEALTH_PATH) as resp:
            if resp.status == 200:
                return
            reason = f"health check answered HTTP {resp.status}"
    except TimeoutError:
        reason = f"no answer within {timeout_s:g}s; pass --connect-timeout SECONDS to wait longer"
    except aiohttp.ClientConnectorError as exc:
        reason = os.strerror(exc.errno).lower() if exc.errno else _describe(exc)
    except (aiohttp.ClientError, OSError) as exc:
        reason = _describe(exc)
    raise StoreUnreachableError(
        f"cannot reach the store at {url} ({reason})",
        "is `agl store` running there? check --store",
    )


async def _spans_error_body(url: str, rollout_id: str, attempt_id: str | None, timeout_s: float) -> str:
    import aiohttp

    payload: dict[str, Any] = {"rollout_id": rollout_id, "limit": 1, "offset": 0}
    if attempt_id is not None:
        payload["attempt_id"] = attempt_id
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session,
            session.post(url + SPANS_SEARCH_PATH, json=payload) as resp,
        ):
            return await resp.text() if resp.status >= 500 else ""
    except (TimeoutError, aiohttp.ClientError, OSError):
        return ""
