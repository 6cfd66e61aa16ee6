"""Reading finished rollouts from a live Agent Lightning 1.0 ``agl-server`` over REST.

For setups that do not load the hook. It walks ``GET /api/rollouts/terminal``, a
cursor over completions (``after=N``), fetches each rollout and its events, and
saves them into the spool in the hook's format, so one commit path serves both.
The cursor is kept in a file between runs (one per server URL), advanced only
past rollouts that are safely spooled or gone.

What it can miss (the hook does not): the 1.0 trainer deletes every rollout right
after reading it, about once a second, so a rollout deleted before this reader
gets to it is gone (counted as ``missed``). ``agl-server`` keeps everything in
memory: after a restart its completion log starts again at 0, which the reader
notices only when the log is shorter than its saved cursor. Events are those of
the last attempt only (the server's events route has no attempt parameter).
"""

from __future__ import annotations

import hashlib
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracebank.collect.agl1_hook import fetch_events, group_by_attempt, spool_entry, write_entry
from tracebank.collect.errors import StoreRequestError, StoreUnreachableError

PAGE = 1000


@dataclass
class RestReadResult:
    """What one REST pass did."""

    spooled: int = 0
    """Rollouts written to the spool."""
    missed: int = 0
    """Terminal rollouts already deleted from the server when read (lost to this reader)."""
    cursor: int = 0
    """The completion-log position saved for the next run."""
    reset: bool = False
    """The server's completion log was shorter than the saved cursor (a restarted server)."""


class Agl1Rest:
    """A small JSON client of one ``agl-server`` (``key``: its optional API key)."""

    def __init__(self, url: str, key: str = "", timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.key = key
        self.timeout = timeout

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        request = urllib.request.Request(f"{self.url}{path}{query}")
        if self.key:
            request.add_header("Authorization", f"Bearer {self.key}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            if exc.code == 401:
                raise StoreRequestError(
                    f"{self.url} refused the API key (401)", "pass the server's key with --agl-key or AGL_KEY"
                ) from None
            raise
        except (urllib.error.URLError, OSError) as exc:
            raise StoreUnreachableError(
                f"cannot reach agl-server at {self.url}: {exc}", "check the URL and that agl-server runs"
            ) from None

    def is_agl1(self) -> bool:
        """Whether the URL answers like an Agent Lightning 1.0 server (its completion cursor route)."""
        try:
            page = self.get("/api/rollouts/terminal", {"after": 0, "limit": 1})
        except (urllib.error.HTTPError, StoreUnreachableError, ValueError):
            return False
        return isinstance(page, dict) and "total_terminal" in page


def cursor_path(folder: Path, url: str) -> Path:
    """The file that keeps the completion cursor of ``url``."""
    digest = hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:16]
    return folder / f".agl1-cursor-{digest}.json"


def _load_cursor(path: Path) -> int:
    try:
        return int(json.loads(path.read_text())["after"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def _save_cursor(path: Path, url: str, after: int) -> None:
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps({"url": url, "after": after}))
    os.replace(tmp, path)


def _fetch_one(client: Agl1Rest, rollout_id: str) -> dict[str, Any] | None:
    """The spool entry of one terminal rollout, or None when the server no longer has it."""
    rid = urllib.parse.quote(rollout_id, safe="")
    try:
        detail = client.get(f"/api/rollouts/{rid}")
        events = fetch_events(client.url, rollout_id, client.key, client.timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise StoreRequestError(f"agl-server answered {exc.code} for rollout {rollout_id}") from None
    rollout = detail["rollout"]
    attempt = (rollout.get("status") or {}).get("last_attempt_id") or "0"
    return spool_entry(rollout, group_by_attempt(events, attempt), "rest", events_complete=True)


def spool_from_server(client: Agl1Rest, spool: Path) -> RestReadResult:
    """Spool every rollout that finished since the last run; keep the cursor in ``spool``."""
    spool.mkdir(parents=True, exist_ok=True)
    path = cursor_path(spool, client.url)
    after = _load_cursor(path)
    result = RestReadResult(cursor=after)
    while True:
        page = client.get("/api/rollouts/terminal", {"after": after, "limit": PAGE})
        if page["total_terminal"] < after:
            after, result.reset = 0, True
            continue
        for item in page["items"]:
            entry = _fetch_one(client, item["rollout_id"])
            if entry is None:
                result.missed += 1
            else:
                write_entry(spool, entry)
                result.spooled += 1
        # Deleted rollouts leave holes in `items`; next_after counts the log positions read.
        # The missed count adds them (a listed id whose rollout is already gone is skipped by the server).
        result.missed += (page["next_after"] - after) - len(page["items"])
        after = page["next_after"]
        _save_cursor(path, client.url, after)
        result.cursor = after
        if after >= page["total_terminal"]:
            return result
