"""What a collect run reads and how hard it pushes the store."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Literal

from tracebank.collect.errors import CollectUsageError

ROLLOUT_STATUSES = ("queuing", "preparing", "running", "failed", "succeeded", "cancelled", "requeuing")
MODES = ("train", "val", "test")
#: What ``tracebank collect`` takes from Agent Lightning 1.0 without ``--status``: 1.0 trains on both.
AGL1_STATUSES = ("succeeded", "failed")


#: Which Agent Lightning wrote a store or server: found out (auto), 0.3 or 1.0.
VERSIONS = ("auto", "agl03", "agl1")


@dataclass(frozen=True)
class CollectConfig:
    """Filters and knobs of one collect run (the CLI flags, one to one)."""

    statuses: tuple[str, ...] = ("succeeded",)
    """Rollout statuses to collect (``--status``, repeatable); without ``--status`` the CLI takes
    succeeded and failed ones from Agent Lightning 1.0 (``AGL1_STATUSES``, 1.0 trains on both)."""
    mode: str | None = None
    """Only rollouts of this mode: train, val or test (``--mode``); None for every mode."""
    rollout_ids: tuple[str, ...] = ()
    """Only these rollouts (``--rollout-id``, repeatable); empty for every rollout."""
    since: float | None = None
    """Only rollouts that started at or after this epoch time (``--since``)."""
    attempts: Literal["latest", "all"] = "latest"
    """``latest``: each rollout's latest attempt (what training uses); ``all``: every attempt."""
    tag: str | None = None
    """A name for this round, kept in the manifest (``--tag``)."""
    redact: bool = True
    """Replace credentials in span attributes with ``[REDACTED]`` (off with ``--no-redact``)."""
    concurrency: int = 8
    """Span queries in flight at once (``--concurrency``). A few keep a store's single event loop
    busy; with 16 the `agl store` server spent ~25-40% more CPU on the same queries (2-core bench)."""
    retries: int = 4
    """Retries of one store request on a transient error (connection error, timeout, 5xx)."""
    backoff_s: float = 0.25
    """First retry delay in seconds; doubled on each further retry (with jitter)."""
    connect_timeout_s: float = field(default=3.0, metadata={"range": {"min": 0, "min_open": True}})
    """Seconds to connect to the store, and for its first health check to answer."""
    read_timeout_s: float = field(default=10.0, metadata={"range": {"min": 0, "min_open": True}})
    """Seconds a store request may wait for its answer; a timed-out request is
    retried once, so a store that accepts and never answers fails in about twice this."""
    page_size: int = 1000
    """Rollouts per ``query_rollouts`` page."""
    rows_per_file: int = 100_000
    """Spans per Parquet file; bounds the memory a large collect holds before writing."""
    silver: bool = True
    """Build the new collection's silver tables (llm_calls, rewards, messages) right after the commit
    (off with ``--no-silver``; ``tracebank rebuild-silver`` builds them later)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Free-form notes copied into the manifest (e.g. who ran the collect)."""

    def validate(self) -> CollectConfig:
        """Return self, or raise a one-line CollectUsageError naming the bad field."""
        check_tag(self.tag)
        bad = [s for s in self.statuses if s not in ROLLOUT_STATUSES]
        if bad or not self.statuses:
            raise CollectUsageError(
                f"invalid --status {', '.join(bad) or '(none)'}",
                f"use one or more of {', '.join(ROLLOUT_STATUSES)}",
            )
        if self.mode is not None and self.mode not in MODES:
            raise CollectUsageError(f"invalid --mode {self.mode!r}", f"use one of {', '.join(MODES)}")
        if self.attempts not in ("latest", "all"):
            raise CollectUsageError(f"invalid --attempts {self.attempts!r}", "use latest or all")
        for name in ("concurrency", "page_size", "rows_per_file"):
            if int(getattr(self, name)) < 1:
                raise CollectUsageError(f"{name.replace('_', '-')} must be at least 1")
        if self.retries < 0 or self.backoff_s < 0:
            raise CollectUsageError("retries and backoff must not be negative")
        if self.connect_timeout_s <= 0 or self.read_timeout_s <= 0:
            raise CollectUsageError("timeouts must be positive")
        return self

    def filters(self) -> dict[str, Any]:
        """The filters as the manifest records them."""
        return {
            "statuses": list(self.statuses),
            "mode": self.mode,
            "rollout_ids": list(self.rollout_ids),
            "since": self.since,
            "attempts": self.attempts,
        }


def check_tag(tag: object) -> None:
    """A round's tag is one line of at most 100 printable characters (it is shown in listings)."""
    if tag is None:
        return
    if (
        not isinstance(tag, str)
        or not tag.strip()
        or len(tag) > 100
        or any(c < " " or c == "\x7f" for c in tag)
    ):
        raise CollectUsageError(f"invalid --tag {tag!r}", "use one line of at most 100 characters")


def parse_since(text: str) -> float:
    """``--since``: epoch seconds, or an ISO date / date-time (UTC unless it names a zone)."""
    value = text.strip()
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise CollectUsageError(
            f"invalid --since {text!r}",
            "use epoch seconds or an ISO date/time such as 2026-11-29 or 2026-11-29T10:15:00Z",
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


@dataclass(frozen=True)
class ReceiveConfig:
    """The OTLP/HTTP receiver's socket and batching (``tracebank receive``'s flags, one to one)."""

    port: int = 4318
    """TCP port to listen on (4318 is OTLP/HTTP's; 0 picks a free one)."""
    host: str = "127.0.0.1"
    """Address to bind; anything but loopback also needs --allow-remote and a token."""
    allow_remote: bool = False
    """Allow a non-loopback --host; refused without a token."""
    token_env: str | None = None
    """Environment variable holding a bearer token every request must carry (Authorization: Bearer)."""
    batch_seconds: float = field(default=5.0, metadata={"range": {"min": 0, "min_open": True}})
    """A trace is committed once no span of it arrived for this long."""
    max_body: int = field(default=16 * 1024 * 1024, metadata={"range": {"min": 1}})
    """Largest request body in bytes, also after gunzip; larger ones get 413."""
    max_pending_spans: int = 200_000
    """Spans held before a commit; past it requests get 503 (the exporter retries)."""
    spool: str | None = None
    """Folder the received conversations wait in until committed; default: a private temporary
    folder, removed at exit once empty."""

    def validate(self) -> ReceiveConfig:
        """Return self, or raise a one-line CollectUsageError naming the bad field."""
        if not 0 <= int(self.port) <= 65535:
            raise CollectUsageError(f"invalid --port {self.port}", "use 0-65535")
        if self.batch_seconds <= 0 or self.max_body < 1 or self.max_pending_spans < 1:
            raise CollectUsageError("--batch-seconds, --max-body and max_pending_spans must be positive")
        return self
