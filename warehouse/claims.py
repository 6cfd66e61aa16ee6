"""Exclusive claims: one writer at a time for a name, on a local folder or an object store.

A claim is a small JSON object created only if no object of that name exists: here
``open(O_CREAT | O_EXCL)``; on object storage the same contract is a conditional create
(``PUT`` with ``If-None-Match: *``), and breaking a stale claim a conditional delete of the
version that was read. No flock, so the mechanism does not depend on the file system.

The claim names its owner (pid, host, the process's start time), so anyone can tell a claim whose
process is gone (SIGKILL, OOM, power loss) from a live one; a claim of a dead process on this
host is broken, a claim of another host is respected until that host's process releases it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracebank.warehouse.errors import WarehouseError
from tracebank.warehouse.mirror import RemoteClaim

if TYPE_CHECKING:
    from tracebank.warehouse.layout import Warehouse

POLL_S = 0.2


def _start_token(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, from /proc), or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


@dataclass(frozen=True)
class Owner:
    """A process that holds a claim or runs a run."""

    pid: int
    """Its process id."""
    host: str
    """The machine it runs on (``socket.gethostname()``)."""
    start: str | None
    """When it started (so a reused pid is not mistaken for it); None where /proc is missing."""
    what: str = ""
    """What it is doing, for messages (``collect``, ``train run R``)."""

    @classmethod
    def current(cls, what: str = "") -> Owner:
        return cls(os.getpid(), socket.gethostname(), _start_token(os.getpid()), what)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Owner:
        return cls(int(data["pid"]), str(data["host"]), data.get("start"), str(data.get("what", "")))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def alive(self) -> bool | None:
        """True or False on this host; None for a process of another host (cannot be known here)."""
        if self.host != socket.gethostname():
            return None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass  # exists, owned by another user
        return self.start is None or _start_token(self.pid) == self.start

    def describe(self) -> str:
        return f"{self.what or 'a process'} (pid {self.pid} on {self.host})"


class ClaimHeldError(WarehouseError):
    """Another live process holds the claim."""

    def __init__(self, message: str, hint: str | None, holder: Owner) -> None:
        super().__init__(message, hint)
        self.holder = holder


def read_claim(path: Path) -> tuple[Owner, bytes] | None:
    """The owner of the claim at ``path`` and its exact bytes, or None when there is none."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        return Owner.from_dict(json.loads(raw)), raw
    except (ValueError, KeyError, TypeError):
        # A claim being written right now is never seen half-written (it is created whole below),
        # so an unreadable one is damage: treat its owner as gone.
        return Owner(-1, socket.gethostname(), None, "an unreadable claim"), raw


def _create(path: Path, payload: bytes) -> bool:
    """Create ``path`` with ``payload`` iff it does not exist; False if it does."""
    tmp = path.with_name(f".{path.name}.tmp-{secrets.token_hex(4)}")
    with open(tmp, "wb") as fh:
        fh.write(payload)
        fh.flush()
        os.fsync(fh.fileno())
    try:
        os.link(tmp, path)  # fails if path exists: the conditional create, written whole
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)


def _break_if_same(path: Path, seen: bytes) -> None:
    """Remove the claim at ``path`` only if it still holds ``seen`` (a conditional delete)."""
    aside = path.with_name(f".{path.name}.broken-{secrets.token_hex(4)}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    if aside.read_bytes() != seen:  # someone took it over between our read and the rename
        with contextlib.suppress(FileExistsError):
            os.link(aside, path)
    aside.unlink(missing_ok=True)


def warehouse_claim(wh: Warehouse, name: str) -> Path | RemoteClaim:
    """The claim called ``name`` of a warehouse: a file in its folder, or on its object store
    (so writers on different machines exclude each other)."""
    if wh.remote is not None:
        return RemoteClaim(wh.remote, f"claims/{name}")
    return wh.root / "claims" / f"{name}.claim"


def try_claim(path: Path | RemoteClaim, owner: Owner) -> Owner | None:
    """Claim ``path`` for ``owner``: None when claimed, else the live (or unknown) holder."""
    if isinstance(path, RemoteClaim):
        return path.try_claim(owner)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = json.dumps({**owner.to_dict(), "since": time.time()}, sort_keys=True).encode()
    for _ in range(3):
        if _create(path, payload):
            return None
        held = read_claim(path)
        if held is None:
            continue  # released meanwhile
        holder, raw = held
        if holder.alive() is False:
            _break_if_same(path, raw)
            continue
        return holder
    held = read_claim(path)
    return held[0] if held else None


def release(path: Path | RemoteClaim, owner: Owner) -> None:
    """Give up a claim ``owner`` holds (a claim someone else holds is left alone)."""
    if isinstance(path, RemoteClaim):
        path.release(owner)
        return
    held = read_claim(path)
    if held is not None and held[0].pid == owner.pid and held[0].host == owner.host:
        _break_if_same(path, held[1])


@contextlib.contextmanager
def claimed(
    path: Path | RemoteClaim,
    owner: Owner,
    wait: bool,
    on_wait: Callable[[Owner], None] | None = None,
    busy_hint: str | None = None,
) -> Iterator[None]:
    """Hold the claim at ``path`` for the block. ``wait``: poll until it is free (``on_wait`` is
    told once whom it waits for); otherwise raise ClaimHeldError naming the holder."""
    told = False
    while (holder := try_claim(path, owner)) is not None:
        if not wait:
            raise ClaimHeldError(f"{path.name} is held by {holder.describe()}", busy_hint, holder)
        if not told and on_wait is not None:
            on_wait(holder)
            told = True
        time.sleep(POLL_S)
    try:
        yield
    finally:
        release(path, owner)
