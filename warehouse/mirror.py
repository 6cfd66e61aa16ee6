"""A warehouse on object storage, worked on through a local mirror of its committed folders.

The object store holds the truth; this machine keeps a mirror (``Warehouse.root``, under
``~/.cache/tracebank/warehouses/``) that every reader and writer uses exactly as a local
warehouse. :class:`~tracebank.warehouse.storage.Storage` calls in here at each transition:

- **Reading** (:func:`pull_folders`, :func:`pull_runs`): list the store; a folder is
  committed when its manifest key exists, and its manifest is copied into the mirror. A
  folder whose manifest went (a retired collection) goes from the mirror too. The listing's
  size and time of each manifest are remembered beside it, so an unchanged folder costs
  nothing the next time. Data files come when a reader first needs them
  (:func:`ensure_files`, called by ``storage.files_of``): downloaded beside their final name,
  checked against the manifest's size and sha256, then renamed into place, so a mirror holds
  only what its machine read, and only verified bytes.
- **Committing** (:func:`push_commit`): the data files go up under their final names (each
  in a folder only this writer uses: a reserved version number, a fresh collection id, a
  random silver build suffix), then the manifest, last. A collection's or a version's
  manifest is a conditional create (``If-None-Match: *``): a second writer of the same name
  fails instead of replacing it. A writer killed before its manifest leaves files no
  reader lists; `tracebank gc` removes them after its ``--min-age``.
- **Claiming a name** (:func:`reserve_version`, :class:`RemoteClaim`): conditional creates,
  the only primitive two machines can race on safely.

Why a mirror rather than remote scans: committed files never change, so a verified copy
is always right; DuckDB (which cannot fetch its httpfs extension offline) and the trainer's
memory-mapped reads then work unchanged; and a download is checked against the manifest's
sha256, which DuckDB's own reads never do. The cost is disk: a mirror holds what this
machine has read.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracebank.warehouse import commit
from tracebank.warehouse.errors import CorruptFileError, WarehouseError
from tracebank.warehouse.records import CollectionManifest, DatasetManifest, SilverManifest

if TYPE_CHECKING:
    from tracebank.warehouse.claims import Owner
    from tracebank.warehouse.layout import Warehouse
    from tracebank.warehouse.objectstore import ObjectStore, StoredFile
    from tracebank.warehouse.records import FileEntry, Manifest

MANIFEST = "manifest.json"
FORMAT = "FORMAT.json"
#: Beside a mirrored manifest: the store listing's size and time of it when it was pulled.
PULLED = ".pulled"
#: In a reserved version folder of the store: who reserved the number, and when.
RESERVED = "RESERVED"


@contextlib.contextmanager
def remote_errors(store: ObjectStore) -> Iterator[None]:
    """Turn the S3 client's failures (no endpoint, no credentials, no bucket) into one line."""
    try:
        yield
    except WarehouseError:
        raise
    except Exception as exc:
        if type(exc).__module__.split(".")[0] not in ("botocore", "boto3", "s3transfer", "pyarrow"):
            raise
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise WarehouseError(
            f"cannot reach the warehouse at {store.uri}: {first}",
            "check the bucket and the AWS_* settings (endpoint, keys, region) this process sees",
        ) from exc


def rel(wh: Warehouse, path: Path) -> str:
    """``path`` inside the mirror as a store key relative to the warehouse root."""
    return path.relative_to(wh.root).as_posix()


# -- the format file ----------------------------------------------------------------------
def init_remote(wh: Warehouse) -> None:
    """Create the store's FORMAT.json unless it exists (two first writers race safely)."""
    from tracebank.warehouse.layout import FORMAT_NAME, FORMAT_VERSION

    payload = commit.json_bytes({"format": FORMAT_NAME, "version": FORMAT_VERSION})
    with remote_errors(wh.remote):
        wh.remote.create_exclusive(FORMAT, payload)
    fetch_format(wh)


def fetch_format(wh: Warehouse) -> bool:
    """Copy the store's FORMAT.json into the mirror; False when the store has none."""
    with remote_errors(wh.remote):
        data = wh.remote.get(FORMAT)
    if data is None:
        return False
    commit.write_bytes_atomic(wh.format_file, data)
    return True


# -- reading --------------------------------------------------------------------------------
def _manifests(listing: list[StoredFile], prefix: str) -> dict[str, StoredFile]:
    """Folder key -> its manifest's listing entry, for folders directly under ``prefix``."""
    out = {}
    for f in listing:
        folder, _, name = f.path.rpartition("/")
        if name == MANIFEST and folder.rpartition("/")[0] == prefix:
            out[folder] = f
    return out


def _stamp(f: StoredFile) -> str:
    return f"{f.size}:{f.mtime}"


def _download_verified(wh: Warehouse, key: str, dest: Path, size: int, sha256: str) -> None:
    with commit.atomic_path(dest) as tmp:
        if not wh.remote.get_file(key, tmp):
            raise CorruptFileError(f"committed file {wh.remote.uri}/{key} is missing from the store")
        if tmp.stat().st_size != size or commit.sha256_file(tmp) != sha256:
            raise CorruptFileError(
                f"committed file {wh.remote.uri}/{key} does not match its manifest (size or sha256)",
                "the object was altered after commit; restore it or remove its folder's manifest",
            )


def pull_folder(wh: Warehouse, folder: Path, kind: type[Manifest], listed: StoredFile | None = None) -> None:
    """Bring one folder's manifest from the store into the mirror as the store has it now
    (committed, replaced or retired); ``listed``, its listing entry, lets an unchanged one be
    skipped. Its data files come when a reader asks for them (:func:`ensure_files`)."""
    key = rel(wh, folder)
    if listed is not None and (folder / PULLED).exists() and (folder / PULLED).read_text() == _stamp(listed):
        return
    with remote_errors(wh.remote):
        data = wh.remote.get(f"{key}/{MANIFEST}")
    if data is None:
        _retire(folder)
        return
    try:
        kind.from_json(json.loads(data), f"{wh.remote.uri}/{key}/{MANIFEST}")
    except ValueError as exc:
        raise CorruptFileError(f"{wh.remote.uri}/{key}/{MANIFEST} is not valid JSON: {exc}") from exc
    local = folder / MANIFEST
    if not (local.exists() and local.read_bytes() == data):
        commit.write_bytes_atomic(local, data)
    if listed is not None:
        commit.write_bytes_atomic(folder / PULLED, _stamp(listed).encode())


#: The mirrors this process works in, by root: how a reader given only a folder finds its store.
_MIRRORS: dict[Path, Warehouse] = {}


def register(wh: Warehouse) -> None:
    """Note that ``wh.root`` mirrors ``wh.remote`` (``Warehouse.resolve`` calls it)."""
    _MIRRORS[wh.root] = wh


def ensure_files(folder: Path, entries: Iterable[FileEntry]) -> None:
    """Download the committed files ``entries`` of ``folder`` that this mirror lacks, each
    checked against its manifest entry; nothing for a folder that is not in a mirror."""
    wh = next((w for root, w in _MIRRORS.items() if folder.is_relative_to(root)), None)
    if wh is None:
        return
    key = rel(wh, folder)
    with remote_errors(wh.remote):
        for entry in entries:
            path = folder / entry.path
            if not (path.exists() and path.stat().st_size == entry.bytes):
                _download_verified(wh, f"{key}/{entry.path}", path, entry.bytes, entry.sha256)


def _retire(folder: Path) -> None:
    (folder / MANIFEST).unlink(missing_ok=True)
    (folder / PULLED).unlink(missing_ok=True)


def pull_folders(wh: Warehouse, parent: Path, kind: type[Manifest]) -> None:
    """Mirror the committed folders directly under ``parent`` (e.g. ``collections/``)."""
    prefix = rel(wh, parent)
    with remote_errors(wh.remote):
        committed = _manifests(wh.remote.walk(prefix), prefix)
        for key, listed in committed.items():
            pull_folder(wh, wh.root / key, kind, listed)
    if parent.exists():
        for folder in parent.iterdir():
            if (folder / MANIFEST).exists() and rel(wh, folder) not in committed:
                pull_folder(wh, folder, kind)  # retired meanwhile, or committed after the listing


def children(wh: Warehouse, folder: Path) -> list[str]:
    """The names the store has directly under ``folder`` (datasets, version folders)."""
    with remote_errors(wh.remote):
        return wh.remote.children(rel(wh, folder))


def commit_folder(key: str) -> tuple[str, type[Manifest]] | None:
    """The commit folder a store key belongs to (``collections/<id>``, ``silver/<id>``,
    ``datasets/<name>/<v>``) and the manifest it takes, or None for keys outside one."""
    parts = key.split("/")
    if parts[0] == "collections" and len(parts) >= 3:
        return "/".join(parts[:2]), CollectionManifest
    if parts[0] == "silver" and len(parts) >= 3:
        return "/".join(parts[:2]), SilverManifest
    if parts[0] == "datasets" and len(parts) >= 4:
        return "/".join(parts[:3]), DatasetManifest
    return None


def pull_runs(wh: Warehouse) -> None:
    """Mirror every run's record and metrics (records change while a run runs)."""
    from tracebank.warehouse.storage import RUN_METRICS, RUN_RECORD

    with remote_errors(wh.remote):
        for f in wh.remote.walk(rel(wh, wh.runs_dir)):
            folder_key, _, name = f.path.rpartition("/")
            if name not in (RUN_RECORD, RUN_METRICS):
                continue
            stamp = wh.root / folder_key / f".{name}{PULLED}"
            if stamp.exists() and stamp.read_text() == _stamp(f):
                continue
            if _written_here(wh.root / folder_key / RUN_RECORD):
                continue  # this machine runs it: its mirror is newer than the store
            with commit.atomic_path(wh.root / f.path) as tmp:
                if not wh.remote.get_file(f.path, tmp):
                    tmp.write_bytes(b"")
            commit.write_bytes_atomic(stamp, _stamp(f).encode())


def _written_here(record: Path) -> bool:
    """Whether the run of ``record`` is running in a live process of this host."""
    from tracebank.warehouse.claims import Owner

    try:
        data = json.loads(record.read_text())
    except (OSError, ValueError):
        return False
    owner = data.get("owner") if isinstance(data, dict) else None
    if data.get("status") != "running" or not isinstance(owner, dict):
        return False
    try:
        return Owner.from_dict(owner).alive() is True
    except (KeyError, TypeError, ValueError):
        return False


# -- writing --------------------------------------------------------------------------------
def push_commit(
    wh: Warehouse, folder: Path, manifest_bytes: bytes, files: list[str], exclusive: bool
) -> None:
    """Upload ``files`` of ``folder``, then its manifest last (a conditional create if ``exclusive``)."""
    key = rel(wh, folder)
    with remote_errors(wh.remote):
        for name in files:
            wh.remote.put_file(f"{key}/{name}", folder / name)
        if not exclusive:
            wh.remote.put(f"{key}/{MANIFEST}", manifest_bytes)
        elif not wh.remote.create_exclusive(f"{key}/{MANIFEST}", manifest_bytes):
            raise WarehouseError(f"{wh.remote.uri}/{key} was committed by another writer first")


def push_file(wh: Warehouse, path: Path) -> None:
    """Upload one mirrored file as it is now (a run's record or metrics)."""
    with remote_errors(wh.remote):
        wh.remote.put_file(rel(wh, path), path)


def retire(wh: Warehouse, folder: Path) -> None:
    """Remove a folder's manifest from the store (its files stay for `tracebank gc`)."""
    with remote_errors(wh.remote):
        wh.remote.delete(f"{rel(wh, folder)}/{MANIFEST}")
    _retire(folder)


def reserve_version(wh: Warehouse, name: str, first: int, owner: Owner) -> int:
    """Claim the first free version number of ``name`` from ``first`` on, by a conditional create."""
    parent = rel(wh, wh.dataset_dir(name))
    payload = json.dumps({**owner.to_dict(), "since": time.time()}, sort_keys=True).encode()
    version = first
    with remote_errors(wh.remote):
        while not wh.remote.create_exclusive(f"{parent}/v{version:04d}/{RESERVED}", payload):
            version += 1
    return version


def release_version(wh: Warehouse, folder: Path) -> None:
    """Give a reserved, never committed version number back, with anything uploaded under it."""
    key = rel(wh, folder)
    with remote_errors(wh.remote):
        if wh.remote.get(f"{key}/{MANIFEST}") is not None:
            return  # committed after all: never take a visible version apart
        for f in wh.remote.walk(key):
            if not f.path.endswith(f"/{RESERVED}"):
                wh.remote.delete(f.path)
        wh.remote.delete(f"{key}/{RESERVED}")


def clear_local(folder: Path) -> None:
    """Empty a mirror folder a crashed writer of this machine left (its number is ours now)."""
    shutil.rmtree(folder, ignore_errors=True)


# -- claims ---------------------------------------------------------------------------------
#: How often a holder of a claim on object storage says it is alive.
HEARTBEAT_S = 30.0
#: A claim whose holder has not said so for this long is stale, whatever host it is on.
STALE_S = 300.0


@dataclass(frozen=True)
class RemoteClaim:
    """A claim on object storage, for writers on different machines.

    Generations ``<key>/0000000001``, ``...2``: the holder is the newest generation without
    a ``.released`` marker. Taking the claim is a conditional create of the next generation,
    so exactly one of several racing writers gets it, with no conditional delete needed.
    The holder rewrites ``<gen>.alive`` every HEARTBEAT_S; a generation whose owner is gone
    (seen from its own host), or silent for STALE_S (a host that died), counts as released.
    """

    store: Any
    key: str
    _beats: dict[int, threading.Event] = field(default_factory=dict, compare=False, repr=False)

    @property
    def name(self) -> str:
        return self.key.rpartition("/")[2]

    def _generations(self) -> tuple[list[int], set[int], dict[int, float]]:
        """Generation numbers, the released ones, and when each holder was last heard from."""
        gens: list[int] = []
        released: set[int] = set()
        heard: dict[int, float] = {}
        for f in self.store.walk(self.key):
            number, _, suffix = f.path.rpartition("/")[2].partition(".")
            if not number.isdigit():
                continue
            gen = int(number)
            if suffix == "released":
                released.add(gen)
                continue
            if suffix == "":
                gens.append(gen)
            heard[gen] = max(heard.get(gen, 0.0), f.mtime)
        return sorted(gens), released, heard

    def _holder(self, gen: int) -> Owner | None:
        from tracebank.warehouse.claims import Owner

        data = self.store.get(f"{self.key}/{gen:010d}")
        if data is None:
            return None
        try:
            return Owner.from_dict(json.loads(data))
        except (ValueError, KeyError, TypeError):
            return None

    def try_claim(self, owner: Owner) -> Owner | None:
        """Claim it for ``owner``: None when claimed, else the live (or unknown) holder."""
        payload = json.dumps({**owner.to_dict(), "since": time.time()}, sort_keys=True).encode()
        holder = None
        with remote_errors(self.store):
            for _ in range(5):
                gens, released, heard = self._generations()
                top = gens[-1] if gens else 0
                holder = self._holder(top) if top and top not in released else None
                silent = time.time() - heard.get(top, 0.0) > STALE_S
                if holder is not None and holder.alive() is not False and not silent:
                    return holder
                if self.store.create_exclusive(f"{self.key}/{top + 1:010d}", payload):
                    self._start_heartbeat(top + 1)
                    return None
            return holder

    def _start_heartbeat(self, gen: int) -> None:
        stop = threading.Event()
        self._beats[gen] = stop

        def beat() -> None:
            while not stop.wait(HEARTBEAT_S):
                with contextlib.suppress(Exception):  # a missed beat is retried; STALE_S allows ten
                    self.store.put(f"{self.key}/{gen:010d}.alive", b"")

        threading.Thread(target=beat, name=f"claim-{self.name}-{gen}", daemon=True).start()

    def release(self, owner: Owner) -> None:
        """Give up the claim ``owner`` holds (a claim someone else holds is left alone)."""
        for stop in self._beats.values():
            stop.set()
        with remote_errors(self.store):
            gens, released, _ = self._generations()
            for gen in reversed(gens):
                holder = self._holder(gen)
                if holder is not None and (holder.pid, holder.host) == (owner.pid, owner.host):
                    if gen not in released:
                        self.store.put(f"{self.key}/{gen:010d}.released", b"")
                    return


#: How often a running run's metrics go up to the store (each upload is the whole file).
METRICS_PUSH_S = 5.0
_last_push: dict[Path, float] = {}


def push_due(path: Path) -> bool:
    """Whether ``path`` was last uploaded over METRICS_PUSH_S ago (the run record's updates
    upload it too, so nothing is left behind when a run ends)."""
    now = time.monotonic()
    if now - _last_push.get(path, 0.0) < METRICS_PUSH_S:
        return False
    _last_push[path] = now
    return True
