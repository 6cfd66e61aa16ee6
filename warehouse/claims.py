"""Exclusive claims: one writer at a time for a name, over any byte store (a folder or a bucket).

A claim is a folder of generations ``<key>/0000000001``, ``...2``: the holder is the newest
generation without a ``.released`` companion. Taking the claim is an exclusive create of the
next generation, so exactly one of several racing writers gets it, on any store, with no
conditional delete and no flock. Each generation names its owner (pid, host, the process's start
time), so anyone can tell a claim whose process is gone (SIGKILL, OOM, power loss) from a live
one: a holder that is gone on this host, or silent for STALE_S on another host (the holder rewrites
``<gen>.alive`` every HEARTBEAT_S), counts as released.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tracebank.core.errors import WarehouseError
from tracebank.warehouse import layout
from tracebank.warehouse.bytestore import ByteStore, RemoteStore
from tracebank.warehouse.location import Warehouse

POLL_S = 0.2
#: How often a holder says it is alive.
HEARTBEAT_S = 30.0
#: A holder of another host not heard from for this long is gone, whatever its pid says.
STALE_S = 300.0
#: The largest process id Linux hands out (PID_MAX_LIMIT on 64-bit).
PID_MAX = 2**22


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
    def from_dict(cls, data: Any) -> Owner:
        """The owner ``data`` names; ValueError unless it is one (a claim or a run record may come
        from a shared bucket: a pid beyond what the OS takes used to end `runs list` in a traceback)."""
        if not isinstance(data, dict):
            raise ValueError(f"an owner is an object, not {type(data).__name__}")
        pid, host, start, what = data.get("pid"), data.get("host"), data.get("start"), data.get("what", "")
        if type(pid) is not int or not 0 < pid <= PID_MAX:
            raise ValueError(f"owner pid {str(pid)[:20]!r} is not a process id")
        if not isinstance(host, str) or not 0 < len(host) <= 255:
            raise ValueError("owner host is not a host name")
        if not (start is None or (isinstance(start, str) and start.isdigit() and len(start) <= 32)):
            raise ValueError("owner start is not a start time")
        if not isinstance(what, str):
            raise ValueError("owner what is not text")
        return cls(pid, host, start, what[:200])

    @classmethod
    def parse(cls, data: Any) -> Owner | None:
        """The owner ``data`` names, or None when it names none (damage: not a holder)."""
        try:
            return cls.from_dict(data)
        except ValueError:
            return None

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

    def same_process(self, other: Owner) -> bool:
        return (self.pid, self.host) == (other.pid, other.host)

    def describe(self) -> str:
        return f"{self.what or 'a process'} (pid {self.pid} on {self.host})"


class ClaimHeldError(WarehouseError):
    """Another live process holds the claim."""

    def __init__(self, message: str, hint: str | None, holder: Owner) -> None:
        super().__init__(message, hint)
        self.holder = holder


@dataclass
class _Generations:
    numbers: list[int]
    released: set[int]
    heard: dict[int, float]

    @property
    def top(self) -> int:
        return self.numbers[-1] if self.numbers else 0


@dataclass
class Claim:
    """The claim ``key`` of ``store``."""

    store: RemoteStore
    key: str
    _beats: dict[int, threading.Event] = field(default_factory=dict, compare=False, repr=False)

    @property
    def name(self) -> str:
        return self.key.rpartition("/")[2]

    def _gen_key(self, gen: int, suffix: str = "") -> str:
        return f"{self.key}/{gen:010d}{suffix}"

    def _generations(self) -> _Generations:
        found = _Generations([], set(), {})
        for f in self.store.walk(self.key):
            number, dot, suffix = f.path.rpartition("/")[2].partition(".")
            if not number.isdigit():
                continue
            gen = int(number)
            if f"{dot}{suffix}" == layout.CLAIM_RELEASED:
                found.released.add(gen)
                continue
            if not suffix:
                found.numbers.append(gen)
            found.heard[gen] = max(found.heard.get(gen, 0.0), f.mtime)
        found.numbers.sort()
        return found

    def _owner_of(self, gen: int) -> Owner | None:
        data = self.store.get(self._gen_key(gen))
        try:
            doc = json.loads(data) if data is not None else None
        except ValueError:
            return None
        return Owner.parse(doc)  # a generation is created whole, so an unreadable one is damage: not a holder

    def _live_holder(self, gens: _Generations) -> Owner | None:
        if not gens.top or gens.top in gens.released:
            return None
        owner = self._owner_of(gens.top)
        if owner is None:
            return None
        alive = owner.alive()
        if alive is None:  # another host: trust its heartbeat
            alive = time.time() - gens.heard.get(gens.top, 0.0) <= STALE_S
        return owner if alive else None

    def holder(self) -> Owner | None:
        """The live (or unknowable) holder, or None when the claim is free."""
        return self._live_holder(self._generations())

    def try_claim(self, owner: Owner) -> Owner | None:
        """Claim it for ``owner``: None when claimed, else the live (or unknown) holder."""
        payload = json.dumps({**owner.to_dict(), "since": time.time()}, sort_keys=True).encode()
        holder = None
        for _ in range(5):
            gens = self._generations()  # one listing: the holder and the next number agree
            holder = self._live_holder(gens)
            if holder is not None:
                return holder
            if self.store.create_exclusive(self._gen_key(gens.top + 1), payload):
                self._start_heartbeat(gens.top + 1)
                return None
        return holder

    def _start_heartbeat(self, gen: int) -> None:
        stop = threading.Event()
        self._beats[gen] = stop

        def beat() -> None:
            while not stop.wait(HEARTBEAT_S):
                with contextlib.suppress(Exception):  # a missed beat is retried; STALE_S allows ten
                    self.store.put(self._gen_key(gen, layout.CLAIM_ALIVE), b"")

        threading.Thread(target=beat, name=f"claim-{self.name}-{gen}", daemon=True).start()

    def release(self, owner: Owner) -> None:
        """Give up the claim ``owner`` holds (a claim someone else holds is left alone)."""
        for stop in self._beats.values():
            stop.set()
        gens = self._generations()
        for gen in reversed(gens.numbers):
            held_by = self._owner_of(gen)
            if held_by is not None and held_by.same_process(owner):
                if gen not in gens.released:
                    self.store.put(self._gen_key(gen, layout.CLAIM_RELEASED), b"")
                self._forget_before(gen)
                return

    def _forget_before(self, gen: int) -> None:
        """Delete the generations older than ``gen``: every claimer already counts from ``gen`` up
        (the newest is never deleted here, so no claimer can be handed a number twice)."""
        for f in self.store.walk(self.key):
            number = f.path.rpartition("/")[2].partition(".")[0]
            if number.isdigit() and int(number) < gen:
                self.store.delete(f.path)

    def clear_if_free(self, older_than: float) -> list[str]:
        """Delete every generation once nobody holds the claim and none was written for
        ``older_than`` seconds; the keys deleted."""
        if self.holder() is not None:
            return []
        files = self.store.walk(self.key)
        if any(time.time() - f.mtime < older_than for f in files):
            return []
        for f in files:
            self.store.delete(f.path)
        return [f.path for f in files]


def warehouse_claim(wh: Warehouse, name: str) -> Claim:
    """The claim called ``name`` of a warehouse, on its store (so writers on different machines
    exclude each other)."""
    store: ByteStore = wh.store
    return Claim(store, layout.claim_key(name))


def output_claim(wh: Warehouse, output: Path) -> Claim:
    """The claim that lets only one run at a time (of this warehouse) write the model folder ``output``."""
    return Claim(wh.store, layout.output_claim_key(output))


def try_claim(claim: Claim, owner: Owner) -> Owner | None:
    """Claim ``claim`` for ``owner``: None when claimed, else the live (or unknown) holder."""
    return claim.try_claim(owner)


def release(claim: Claim, owner: Owner) -> None:
    """Give up a claim ``owner`` holds (a claim someone else holds is left alone)."""
    claim.release(owner)


@contextlib.contextmanager
def claimed(
    claim: Claim,
    owner: Owner,
    wait: bool,
    on_wait: Callable[[Owner], None] | None = None,
    busy_hint: str | None = None,
) -> Iterator[None]:
    """Hold ``claim`` for the block. ``wait``: poll until it is free (``on_wait`` is told once whom
    it waits for); otherwise raise ClaimHeldError naming the holder."""
    told = False
    while (holder := claim.try_claim(owner)) is not None:
        if not wait:
            raise ClaimHeldError(f"{claim.name} is held by {holder.describe()}", busy_hint, holder)
        if not told and on_wait is not None:
            on_wait(holder)
            told = True
        time.sleep(POLL_S)
    try:
        yield
    finally:
        claim.release(owner)
