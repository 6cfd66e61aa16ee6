"""``tracebank receive``: an OTLP/HTTP trace receiver that commits LLM spans through the collect path.

POST ``/v1/traces`` with an ``application/x-protobuf`` or ``application/json`` body (optionally
gzip) is what the OpenTelemetry SDKs' OTLP/HTTP exporters send. Spans are held per trace; a
trace that got no span for ``batch_seconds`` becomes one conversation
(:mod:`~tracebank.collect.formats.otlp`), is written as a 1.0 spool entry into the receiver's
spool folder, and the folder is committed with the caller's ``commit`` (the one collect path:
claim, redaction, exactly-once, manifest). Stopping (``stop`` set, Ctrl-C or SIGTERM) commits
every trace still held.

The socket trusts nothing: loopback unless the caller allowed more, a body cap checked on
Content-Length before reading and again after gunzip, an optional bearer token compared in
constant time, one bounded parse per request. No record chooses a path or a host: spool file
names are the trace id made safe by ``spool_name``.
"""

from __future__ import annotations

import hmac
import json
import signal
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tracebank.collect.agl1_hook import SUFFIX, write_entry
from tracebank.collect.config import ReceiveConfig
from tracebank.collect.conversation import BadRecord, spool_entry
from tracebank.collect.formats.lines import checked_value
from tracebank.collect.formats.otlp import Span, request_spans, trace_conversation
from tracebank.collect.formats.otlp_messages import SpanError

PATH = "/v1/traces"
CONTENT_TYPES = {"application/x-protobuf": "protobuf", "application/json": "json"}
MAX_BAD_SHOWN = 20
"""Bad records a result names (all are counted)."""


@dataclass
class ReceiveResult:
    """What one receiver run took in and committed."""

    url: str
    """Where it listened (``http://HOST:PORT/v1/traces``)."""
    requests: int = 0
    """Export requests accepted."""
    spans: int = 0
    """Spans in them."""
    conversations: int = 0
    """Conversations (traces with LLM spans) written to the spool and committed."""
    commits: int = 0
    """Collect runs made."""
    bad: int = 0
    """Spans left out (unreadable), counted."""
    bad_lines: list[str] = field(default_factory=list)
    """The first :data:`MAX_BAD_SHOWN` of them, one line each."""
    warnings: list[str] = field(default_factory=list)
    """Things to tell the user (uncommitted entries left behind)."""

    def summary_lines(self) -> list[str]:
        lines = [
            f"received {self.requests} requests, {self.spans} spans at {self.url}; committed "
            f"{self.conversations} conversations in {self.commits} commits; {self.bad} bad records"
        ]
        return lines + [f"bad record: {line}" for line in self.bad_lines]


class Refused(Exception):
    """A request answered with an HTTP error status."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


class Receiver:
    """Spans received and not yet committed, and the commit of quiet traces."""

    def __init__(self, config: ReceiveConfig, token: str, spool: Path, commit: Callable[[], Any]) -> None:
        self.config = config
        self.token = token.encode()
        self.spool = spool
        self.commit = commit
        self.lock = threading.Lock()
        self.flushing = threading.Lock()
        self.pending: dict[str, list[Span]] = {}
        self.last_seen: dict[str, float] = {}
        self.held = 0
        self.result = ReceiveResult(url="")

    # -- requests (handler threads) --
    def authorized(self, header: str | None) -> bool:
        if not self.token:
            return True
        given = (header or "").removeprefix("Bearer ").encode()
        return header is not None and header.startswith("Bearer ") and hmac.compare_digest(given, self.token)

    def decode(self, body: bytes, kind: str, encoding: str) -> list[Span | BadRecord]:
        if encoding == "gzip":
            body = _gunzip(body, self.config.max_body)
        elif encoding not in ("", "identity"):
            raise Refused(415, f"unsupported Content-Encoding {encoding[:40]!r}")
        if kind == "json":
            value = checked_value(body, "request")
            if isinstance(value, BadRecord) or not isinstance(value, dict):
                raise Refused(400, "the body is not an OTLP/JSON object")
            request: dict[str, Any] | bytes = value
        else:
            request = body
        try:
            return request_spans(request)
        except (SpanError, RecursionError) as exc:
            raise Refused(400, str(exc)[:200]) from None

    def accept(self, items: list[Span | BadRecord]) -> None:
        now = time.monotonic()
        with self.lock:
            if self.held + len(items) > self.config.max_pending_spans:
                raise Refused(503, "too many spans waiting for a commit; retry later")
            self.result.requests += 1
            for item in items:
                if isinstance(item, BadRecord):
                    self._bad(item)
                    continue
                self.pending.setdefault(item.trace_id, []).append(item)
                self.last_seen[item.trace_id] = now
                self.held += 1
                self.result.spans += 1

    def _bad(self, record: BadRecord) -> None:
        self.result.bad += 1
        if len(self.result.bad_lines) < MAX_BAD_SHOWN:
            self.result.bad_lines.append(record.line())

    # -- commits (the main thread) --
    def _take(self, everything: bool) -> dict[str, list[Span]]:
        now = time.monotonic()
        with self.lock:
            quiet = self.config.batch_seconds
            ready = [t for t, seen in self.last_seen.items() if everything or now - seen >= quiet]
            taken = {t: self.pending.pop(t) for t in ready}
            for t in ready:
                del self.last_seen[t]
            self.held -= sum(len(spans) for spans in taken.values())
        return taken

    def flush(self, everything: bool = False) -> None:
        """Write every quiet trace (every trace, with ``everything``) to the spool, then commit it."""
        with self.flushing:
            for trace_id, spans in self._take(everything).items():
                for item in trace_conversation(trace_id, spans):
                    if isinstance(item, BadRecord):
                        with self.lock:
                            self._bad(item)
                    else:
                        write_entry(self.spool, spool_entry(item))
                        self.result.conversations += 1
            if any(p.name.endswith(SUFFIX) for p in self.spool.iterdir()):
                self.commit()
                self.result.commits += 1

    def run(
        self, stop: threading.Event | None = None, on_ready: Callable[[str], None] | None = None
    ) -> ReceiveResult:
        """Serve until ``stop`` is set or the process is interrupted; commit everything held; return."""
        server = _server(self)
        host, port = server.server_address[:2]
        self.result.url = f"http://{_url_host(str(host))}:{port}{PATH}"
        thread = threading.Thread(target=server.serve_forever, name="tracebank-receive", daemon=True)
        thread.start()
        if on_ready is not None:
            on_ready(self.result.url)
        stop = stop or threading.Event()
        previous = _stop_on_signals(stop)
        try:
            while not stop.wait(min(self.config.batch_seconds / 2, 0.5)):
                self.flush()
        except KeyboardInterrupt:  # a second Ctrl-C: stop waiting, still commit what is held
            pass
        finally:
            _restore_signals(previous)
            server.shutdown()
            server.server_close()
        self.flush(everything=True)
        return self.result


def _stop_on_signals(stop: threading.Event) -> dict[int, Any]:
    """Ctrl-C and SIGTERM set ``stop`` instead of raising where they land: one that arrived during a
    commit used to be swallowed by it, and the receiver served on. A second one raises
    KeyboardInterrupt. Only the main thread can hold signal handlers (a receiver in a thread keeps
    the caller's)."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def handle(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    return {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}


def _restore_signals(previous: dict[int, Any]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _gunzip(body: bytes, limit: int) -> bytes:
    """A gzip body inflated to at most ``limit`` bytes (a zip bomb is refused, not inflated)."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        data = inflater.decompress(body, limit + 1)
    except zlib.error:
        raise Refused(400, "the body is not valid gzip") from None
    if len(data) > limit or inflater.unconsumed_tail:
        raise Refused(413, f"the body inflates past {limit} bytes")
    return data


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "tracebank-receive"
        protocol_version = "HTTP/1.1"
        timeout = 30  # a client that stops sending mid-body does not hold a thread for ever

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            pass  # request lines would flood the terminal; the result counts them

        def _answer(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _refuse(self, refused: Refused) -> None:
            self.close_connection = True  # an unread body must not be taken for the next request
            message = json.dumps({"code": refused.status, "message": str(refused)}).encode()
            self._answer(refused.status, message, "application/json")

        def do_POST(self) -> None:
            try:
                kind = self._check()
                body = self._body()
                items = receiver.decode(body, kind, (self.headers.get("Content-Encoding") or "").lower())
                receiver.accept(items)
            except Refused as refused:
                self._refuse(refused)
                return
            if kind == "json":
                self._answer(200, b"{}", "application/json")
            else:
                self._answer(200, b"", "application/x-protobuf")  # an empty ExportTraceServiceResponse

        def _check(self) -> str:
            if self.path.split("?", 1)[0] != PATH:
                raise Refused(404, f"not found; OTLP traces go to {PATH}")
            if not receiver.authorized(self.headers.get("Authorization")):
                raise Refused(401, "missing or wrong bearer token")
            content_type = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
            if content_type not in CONTENT_TYPES:
                raise Refused(415, "use application/x-protobuf or application/json")
            return CONTENT_TYPES[content_type]

        def _body(self) -> bytes:
            length = self.headers.get("Content-Length")
            if length is None or not length.strip().isdigit():
                raise Refused(411, "a Content-Length is required")
            if int(length) > receiver.config.max_body:
                raise Refused(413, f"the body is larger than {receiver.config.max_body} bytes")
            return self.rfile.read(int(length))

        def _not_found(self) -> None:
            self._refuse(Refused(404, f"not found; OTLP traces go to POST {PATH}"))

        do_GET = do_PUT = do_DELETE = do_PATCH = _not_found

    return Handler


def _server(receiver: Receiver) -> ThreadingHTTPServer:
    import socket

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        address_family = socket.AF_INET6 if ":" in receiver.config.host else socket.AF_INET

    return Server((receiver.config.host, int(receiver.config.port)), _handler(receiver))


def check_host(host: str, allow_remote: bool, has_token: bool) -> None:
    """A loopback host, or one the caller allowed explicitly with a token; else a one-line error."""
    import ipaddress
    import warnings

    from tracebank.collect.errors import CollectUsageError

    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        raise CollectUsageError(f"invalid --host {host!r}", "use an IP address such as 127.0.0.1") from None
    if loopback:
        return
    if not allow_remote:
        raise CollectUsageError(
            f"--host {host} is not loopback",
            "add --allow-remote and --token-env VAR to listen beyond this machine",
        )
    if not has_token:
        raise CollectUsageError(f"--host {host} needs a bearer token", "set one with --token-env VAR")
    warnings.warn(
        f"receiving traces on {host}: anyone who can reach it and holds the token can write", stacklevel=2
    )
