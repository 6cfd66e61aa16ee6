"""What one collect run took from its source, on its way to one committed collection.

Every source (a 0.3 store, a 1.0 server, a 1.0 spool) hands each (rollout, attempt) it
reads to a Batch, which is the one commit path: it applies the one skip rule (a pair
that a committed collection holds, or that this run took already, is not taken again),
redacts credentials, writes the Parquet files as records arrive, and builds the one
collection manifest, written last by the entry (``collector.py``). Until then no reader
sees any of it, so a run killed at any point leaves the warehouse as it was.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import secrets
from collections.abc import Callable
from typing import Any, Literal

from tracebank.collect.config import CollectConfig
from tracebank.collect.redact import Redactor, without_credentials
from tracebank.collect.writer import EventFileWriter, SpanFileWriter, write_table
from tracebank.core.versions import installed_versions
from tracebank.warehouse import bronze
from tracebank.warehouse.contract import LLM_SPAN_NAMES
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.records import CollectionManifest, FileEntry
from tracebank.warehouse.storage import Storage, read_table

#: ``progress(done, total)``: attempts handled so far and the best known total.
Progress = Callable[[int, int], None]
#: What a source reads: ``spans`` from an Agent Lightning 0.3 store, ``events`` from 1.0.
Records = Literal["spans", "events"]
Pair = tuple[str, str]

NO_LLM_SPANS_HINT = (
    "likely cause: the LLMProxy exported its spans to localhost:4318 instead of the store "
    "(opentelemetry-exporter-otlp-proto-http >= 1.44 binds the OTLP endpoint when the exporter "
    "is built, and LLMProxy only changes it later); give the proxy an exporter bound to the "
    "store's /v1/traces, or pin the exporter below 1.44"
)
_REDACTED_FIELDS = ("input", "config", "metadata")
#: The distributions whose versions a collection manifest notes (None: not installed).
WRITER_LIBRARIES = ("tracebank", "agentlightning")


def new_collection_id(now: dt.datetime | None = None) -> str:
    """``cYYYYMMDDTHHMMSSZ-mmmrrr``: sorts by creation time to the millisecond (``mmm``, hex),
    and the random ``rrr`` keeps two collects of the same millisecond apart."""
    now = now or dt.datetime.now(dt.UTC)
    return f"c{now:%Y%m%dT%H%M%SZ}-{now.microsecond // 1000:03x}{secrets.token_hex(2)[:3]}"


def committed_attempts(wh: Warehouse) -> tuple[set[Pair], int]:
    """(rollout_id, attempt_id) of every attempt a committed collection holds or recorded as
    evicted, and how many stored attempts repeat one stored before."""
    done: set[Pair] = set()
    repeats = 0
    storage = Storage(wh)
    for folder, manifest in storage.collections():
        storage.check_sizes(folder, manifest)
        for path in storage.files_of(folder, manifest, "attempts"):
            table = read_table([path], columns=["rollout_id", "attempt_id"])
            pairs = set(
                zip(
                    table.column("rollout_id").to_pylist(),
                    table.column("attempt_id").to_pylist(),
                    strict=True,
                )
            )
            repeats += len(pairs & done)
            done |= pairs
        for ev in manifest.evicted:
            done.add((ev["rollout_id"], ev["attempt_id"]))
    return done, repeats


def redact_record(redactor: Redactor, record: dict[str, Any]) -> dict[str, Any]:
    """``record`` (a rollout or attempt row) with credentials in its free-form fields redacted."""
    for key in _REDACTED_FIELDS:
        if key in record:
            record[key] = redactor.value(None, record[key])
    return record


def redact_event(redactor: Redactor, event: dict[str, Any]) -> dict[str, Any]:
    """A 1.0 ``events`` row with credentials in its data redacted."""
    event["data"] = redactor.value(None, event["data"])
    return event


class Batch:
    """The new collection one run builds; sources call ``wants`` and then ``add_*`` per attempt."""

    def __init__(
        self, wh: Warehouse, config: CollectConfig, records: Records, done: set[Pair], repeats: int = 0
    ) -> None:
        self.wh = wh
        self.config = config
        self.records = records
        self.created_at = dt.datetime.now(dt.UTC)
        self.cid = new_collection_id(self.created_at)
        self.folder = wh.collection_dir(self.cid)
        self.storage = Storage(wh)
        self.redactor = Redactor()
        self.spans = SpanFileWriter(self.storage, self.folder, self.cid, config.rows_per_file)
        self.events = EventFileWriter(self.storage, self.folder, self.cid, config.rows_per_file)
        self.rollouts: dict[str, dict[str, Any]] = {}
        self.attempts: list[dict[str, Any]] = []
        self.evicted: list[dict[str, str]] = []
        self.no_llm: list[str] = []
        self.succeeded = 0
        self.incomplete = 0
        self.skipped = 0
        self.noted: dict[str, int] = {"filtered_out": 0}
        self.seconds: dict[str, float] = {}
        self.source_warnings: list[str] = []
        self._done = done
        self._repeats = repeats
        self._seen: set[Pair] = set()
        self._on_commit: list[Callable[[], object]] = []

    # What sources call ----------------------------------------------------------------

    def wants(self, rollout_id: str, attempt_id: str) -> bool:
        """The one skip rule: False for a pair this run took already, or one a committed
        collection holds (counted as skipped); True once per new pair."""
        key = (rollout_id, attempt_id)
        if key in self._seen:
            return False
        self._seen.add(key)
        if key in self._done:
            self.skipped += 1
            return False
        return True

    async def add_spans(
        self, rollout: dict[str, Any], attempt: dict[str, Any], spans: list[dict[str, Any]], plain: bool
    ) -> None:
        """Take one 0.3 attempt and its span dicts (``plain``: see :mod:`collect.fastjson`)."""
        if self.config.redact:
            for span in spans:
                self.redactor.span(span)
        if rollout.get("status") == "succeeded":
            self.succeeded += 1
            if not any(s["name"] in LLM_SPAN_NAMES for s in spans):
                self.no_llm.append(rollout["rollout_id"])
        self.spans.add(spans, plain)
        await self.spans.drain()
        self._add(rollout, attempt)

    def add_events(
        self, rollout: dict[str, Any], attempt: dict[str, Any], events: list[dict[str, Any]], complete: bool
    ) -> None:
        """Take one 1.0 attempt and its ``events`` rows (``complete``: False when the spool entry
        was written without its events)."""
        if self.config.redact:
            for event in events:
                redact_event(self.redactor, event)
        self.events.add(events)
        self.incomplete += not complete
        self._add(rollout, attempt)

    def evict(self, rollout_id: str, attempt_id: str, reason: str) -> None:
        """Record an attempt whose records the store had already dropped (never asked for again)."""
        self.evicted.append({"rollout_id": rollout_id, "attempt_id": attempt_id, "reason": reason})

    def note(self, name: str, count: int) -> None:
        """A count of the source's own for the manifest (``filtered_out``, ``missed``)."""
        self.noted[name] = self.noted.get(name, 0) + count

    def warn(self, text: str) -> None:
        """A warning of the source's own, for the manifest and the caller."""
        self.source_warnings.append(text)

    def on_commit(self, action: Callable[[], object]) -> None:
        """Run ``action`` once everything this run read is committed (by this run or an earlier
        one); never when the run fails."""
        self._on_commit.append(action)

    # What the entry calls -------------------------------------------------------------

    @property
    def has_new(self) -> bool:
        return bool(self.attempts) or bool(self.evicted)

    async def write(self) -> list[FileEntry]:
        """Write what is left and the whole-table files; their manifest entries, in file order."""
        span_files = await self.spans.finish()
        if not self.attempts:
            return span_files
        tables = {
            "rollouts": bronze.rollouts_table(self.rollouts.values(), self.cid),
            "attempts": bronze.attempts_table(self.attempts, self.cid),
        }
        written = [
            await asyncio.to_thread(write_table, self.storage, self.folder, name, table)
            for name, table in tables.items()
        ]
        if self.records == "events":
            written += await asyncio.to_thread(self.events.finish)
        return written + span_files

    async def abandon(self) -> None:
        """Wait for span files being written; none of them is ever committed."""
        await self.spans.abandon()

    def counts(self) -> dict[str, int]:
        """What the run saw and took, as the manifest records it (0.3 and 1.0 keep their keys)."""
        counts = {"rollouts": len(self.rollouts), "attempts": len(self.attempts), "spans": self.spans.rows}
        if self.records == "events":
            counts["events"] = self.events.rows
        counts |= {"skipped": self.skipped, "evicted": len(self.evicted)}
        if self.records == "spans":
            counts["no_llm_spans"] = len(self.no_llm)
        counts["filtered_out"] = self.noted["filtered_out"]
        if self.records == "events":
            counts["incomplete_events"] = self.incomplete
        return counts | self.noted

    def warnings(self) -> list[str]:
        """Every warning of the run, in the one wording for all sources."""
        out = []
        if self._repeats:
            out.append(
                f"{self._repeats} attempts are stored more than once in this warehouse (collects that ran "
                "at the same time before collect took turns); `tracebank repair-duplicates` "
                "keeps one copy of each"
            )
        if self.no_llm:
            out.append(
                f"{len(self.no_llm)} of {self.succeeded} succeeded rollouts have no LLM-call spans "
                f"(raw_gen_ai_request / litellm_request), so there is nothing to train on in them; "
                f"{NO_LLM_SPANS_HINT}"
            )
        if self.evicted:
            out.append(
                f"{len(self.evicted)} attempts had their spans evicted by the store before "
                "collect read them; collect more often (the in-memory store evicts the oldest "
                "rollouts under memory pressure)"
            )
        if self.incomplete:
            out.append(
                f"{self.incomplete} failed rollouts were spooled without their events "
                "(the hook had no TRACEBANK_AGL_URL to ask the server)"
            )
        return out + self.source_warnings

    def redaction(self) -> dict[str, Any]:
        return {"enabled": self.config.redact, "values_redacted": self.redactor.count}

    def manifest(self, store: str, files: list[FileEntry], seconds: dict[str, float]) -> CollectionManifest:
        """The one collection manifest every source commits."""
        config = self.config
        return CollectionManifest(
            collection_id=self.cid,
            created_at=self.created_at.isoformat(),
            finished_at=dt.datetime.now(dt.UTC).isoformat(),
            tag=config.tag,
            store_url=without_credentials(store),  # a URL may carry user:password
            source="agl1" if self.records == "events" else None,
            filters=config.filters(),
            counts=self.counts(),
            seconds=seconds,
            evicted=self.evicted,
            no_llm_spans_rollouts=self.no_llm[:100],
            redaction=self.redaction(),
            warnings=self.warnings(),
            concurrency=config.concurrency if self.records == "spans" else None,
            versions=installed_versions(WRITER_LIBRARIES),
            extra=dict(config.extra),
            files=files,
        )

    def commit(self, manifest: CollectionManifest) -> None:
        """Make the collection visible (its manifest, written last), then run ``on_commit`` actions."""
        self.storage.commit_collection(self.folder, manifest)
        self.committed()

    def committed(self) -> None:
        """Everything read is in a committed collection now: run the sources' ``on_commit`` actions."""
        for action in self._on_commit:
            action()

    def _add(self, rollout: dict[str, Any], attempt: dict[str, Any]) -> None:
        self.attempts.append(self._redacted(attempt))
        if rollout["rollout_id"] not in self.rollouts:
            self.rollouts[rollout["rollout_id"]] = self._redacted(rollout)

    def _redacted(self, record: dict[str, Any]) -> dict[str, Any]:
        return redact_record(self.redactor, record) if self.config.redact else record
