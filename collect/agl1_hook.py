"""Agent Lightning 1.0 trainer hook: spool every finished rollout before the trainer deletes it.

The 1.0 trainer deletes each rollout (and its events) from ``agl-server`` right
after reading it. Point its ``agentlightning.hooks`` setting at this file::

    agentlightning:
      hooks: /path/to/site-packages/tracebank/collect/agl1_hook.py

(``python -c "import tracebank.collect.agl1_hook as h; print(h.__file__)"`` prints
the path) and set ``TRACEBANK_SPOOL`` to a local folder in the trainer's
environment. Each succeeded rollout's record and all its events (and each failed
rollout's record, with the events the server still holds when
``TRACEBANK_AGL_URL`` is set) become one JSON file there;
``tracebank collect --spool DIR`` commits them to a warehouse.

This file runs inside the trainer's Python 3.12 environment, where tracebank is
not installed: it is loaded by path, so it uses the standard library only (the
base class comes from the agentlightning it runs under). It also owns the spool
format, which tracebank's reader imports from here.

Crash safety: a spool file is written under a temporary name and renamed, so a
hook killed mid-write leaves only a ``.tmp-`` file that readers ignore; a
background thread then fsyncs file and folder (against OS crashes) without holding
up the trainer's loop. A failing write raises, and the trainer logs it and goes on.
"""

from __future__ import annotations

import atexit
import importlib.metadata
import json
import os
import queue
import threading
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any

SPOOL_FORMAT = "tracebank-agl1-spool/1"
SPOOL_ENV = "TRACEBANK_SPOOL"
SERVER_URL_ENV = "TRACEBANK_AGL_URL"
SERVER_KEY_ENV = "AGL_KEY"
SUFFIX = ".json"
TMP_MARK = ".tmp-"


def spool_name(rollout_id: str, attempt_id: str) -> str:
    """The spool file of one rollout attempt; the same attempt spooled twice replaces itself."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{rollout_id}.{attempt_id}")
    return safe + SUFFIX


class RawJson(str):
    """JSON text already encoded (pydantic's Rust serializer), embedded in the entry as is."""


def _plain(obj: Any) -> Any:
    """A pydantic model (the trainer's objects) or plain data, as JSON-ready data."""
    dump = getattr(obj, "model_dump", None)
    return dump(mode="json") if callable(dump) else obj


def _event(obj: Any) -> Any:
    # Events hold the token ids and logprobs: most of an entry. model_dump_json encodes
    # them ~5x faster than model_dump + json.dumps, and the hook runs inside the trainer's loop.
    dump_json = getattr(obj, "model_dump_json", None)
    return RawJson(dump_json()) if callable(dump_json) else obj


def spool_entry(
    rollout: Any, events_by_attempt: dict[str, list[Any]] | None, source: str, events_complete: bool
) -> dict[str, Any]:
    """The spool record of one finished rollout (events may stay encoded until written)."""
    record = _plain(rollout)
    status = record.get("status") or {}
    return {
        "format": SPOOL_FORMAT,
        "source": source,
        "spooled_at": time.time(),
        "rollout_id": record["rollout_id"],
        "attempt_id": status.get("last_attempt_id") or "0",
        "state": status.get("state"),
        "events_complete": events_complete,
        "rollout": record,
        "events_by_attempt": {
            aid: [_event(e) for e in events] for aid, events in (events_by_attempt or {}).items()
        },
    }


def _json(value: Any) -> str:
    return value if isinstance(value, RawJson) else json.dumps(value, separators=(",", ":"), allow_nan=False)


def encode_entry(entry: dict[str, Any]) -> bytes:
    """An entry as JSON bytes, with already-encoded events copied in."""
    head = {k: v for k, v in entry.items() if k not in ("rollout", "events_by_attempt")}
    attempts = ",".join(
        f"{json.dumps(str(aid))}:[{','.join(_json(e) for e in events)}]"
        for aid, events in entry["events_by_attempt"].items()
    )
    rollout = _json(entry["rollout"])
    return f'{_json(head)[:-1]},"rollout":{rollout},"events_by_attempt":{{{attempts}}}}}'.encode()


def write_entry(folder: Path, entry: dict[str, Any], durable: bool = True) -> Path:
    """Write ``entry`` into the spool under its final name, atomically; return its path.

    Once this returns the entry survives the writer's death (it is complete in the page
    cache under its final name). ``durable`` also fsyncs file and folder, so it survives
    an OS crash; the hook leaves that to a background thread (see ``BackgroundSync``).
    """
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / spool_name(entry["rollout_id"], entry["attempt_id"])
    tmp = folder / f"{final.name}{TMP_MARK}{uuid.uuid4().hex[:8]}"
    data = encode_entry(entry)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, data)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, final)
    if durable:
        fsync_path(folder)
    return final


def fsync_path(path: Path) -> None:
    """fsync a file or folder by path (gone files are skipped: collect may have taken them)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class BackgroundSync:
    """fsyncs spooled files off the trainer's thread, in batches, and drains at exit.

    An fsync of file and folder costs 10-20 ms on a shared disk; the 1.0 trainer runs
    hooks one rollout at a time inside its poll loop, so doing it inline would add
    seconds per step at batch sizes in the hundreds. The entry is already complete
    under its final name before it is queued here.
    """

    def __init__(self) -> None:
        self.pending: queue.Queue[Path] = queue.Queue()
        threading.Thread(target=self._run, name="tracebank-spool-sync", daemon=True).start()
        atexit.register(self.drain)

    def put(self, path: Path) -> None:
        self.pending.put(path)

    def drain(self) -> None:
        """Wait until every queued entry is on disk."""
        self.pending.join()

    def _run(self) -> None:
        while True:
            batch = [self.pending.get()]
            while not self.pending.empty():
                batch.append(self.pending.get_nowait())
            try:
                for path in batch:
                    fsync_path(path)
                for folder in {path.parent for path in batch}:
                    fsync_path(folder)
            except (OSError, ValueError):  # unreachable, or not JSON: keep the record alone
                pass  # the entry is still complete in the page cache; only OS-crash safety is lost
            finally:
                for _ in batch:
                    self.pending.task_done()


def fetch_events(
    base_url: str, rollout_id: str, key: str = "", timeout: float = 10.0
) -> list[dict[str, Any]]:
    """The events ``agl-server`` holds for a rollout's last attempt (what the trainer reads)."""
    query = urllib.parse.urlencode({"include_routed_experts": "false"})
    rid = urllib.parse.quote(rollout_id, safe="")
    request = urllib.request.Request(f"{base_url.rstrip('/')}/api/rollouts/{rid}/events?{query}")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return list(json.loads(response.read()))


def group_by_attempt(events: list[dict[str, Any]], fallback: str) -> dict[str, list[dict[str, Any]]]:
    """Events grouped by attempt id, as the trainer hands them to ``on_succeeded``."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        grouped.setdefault(event.get("attempt_id") or fallback, []).append(event)
    return grouped or {fallback: []}


def _rollout_hooks_base() -> type:
    """agentlightning 1.x's RolloutHooks inside a 1.0 trainer; ``object`` anywhere else.

    tracebank itself (agentlightning 0.3) imports this module for the spool format
    only; the version check avoids importing agentlightning there at all.
    """
    try:
        major = importlib.metadata.version("agentlightning").split(".")[0]
    except importlib.metadata.PackageNotFoundError:
        return object
    if major == "0":
        return object
    from agentlightning.hooks import RolloutHooks

    return RolloutHooks


class TracebankSpoolHooks(_rollout_hooks_base()):  # type: ignore[misc]
    """Writes every finished rollout to the spool (``$TRACEBANK_SPOOL``) before the trainer deletes it."""

    def __init__(self, spool: str | os.PathLike[str] | None = None, server_url: str | None = None) -> None:
        self.spool = Path(spool or os.environ.get(SPOOL_ENV) or "tracebank-spool")
        self.server_url = server_url if server_url is not None else os.environ.get(SERVER_URL_ENV, "")
        self.key = os.environ.get(SERVER_KEY_ENV, "")
        self.sync = BackgroundSync()

    def on_startup(self, store: Any = None) -> None:
        self.spool.mkdir(parents=True, exist_ok=True)

    def on_succeeded(self, rollout: Any, events: dict[str, list[Any]], store: Any) -> None:
        self._spool(spool_entry(rollout, events, "hook", events_complete=True))

    def _spool(self, entry: dict[str, Any]) -> None:
        self.sync.put(write_entry(self.spool, entry, durable=False))

    def on_failed(self, rollout: Any, store: Any) -> None:
        # The trainer passes no events for a failed rollout, but it has not deleted it yet:
        # ask the server, when told where it is. Without that the record alone is kept.
        events: dict[str, list[Any]] = {}
        complete = False
        record = _plain(rollout)
        attempt = (record.get("status") or {}).get("last_attempt_id") or "0"
        if self.server_url:
            try:
                events = group_by_attempt(
                    fetch_events(self.server_url, record["rollout_id"], self.key), attempt
                )
                complete = True
            except (OSError, ValueError):  # unreachable, or not JSON: keep the record alone
                pass
        self._spool(spool_entry(record, events, "hook", events_complete=complete))
