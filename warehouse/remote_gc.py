"""What `tracebank gc` removes from a warehouse on object storage.

The same rules as a local folder's (see :mod:`tracebank.warehouse.gc`), over the store's listing:
files of a folder that never got a manifest (a writer killed mid-commit, a reserved version
never committed), files a folder's manifest no longer lists (a replaced silver cache), silver
caches of retired collections, and claim generations older than the newest, each once every
one of its objects is older than ``min_age_s``. Committed files and manifests are never touched.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable

from tracebank.warehouse.layout import MANIFEST, Warehouse
from tracebank.warehouse.mirror import RESERVED, commit_folder, remote_errors
from tracebank.warehouse.objectstore import StoredFile

#: ``(key, size)`` of each object to remove.
Remove = Callable[[StoredFile], None]


def _listed(wh: Warehouse, folder: str) -> set[str] | None:
    data = wh.remote.get(f"{folder}/{MANIFEST}")
    if data is None:
        return None
    try:
        return {MANIFEST, RESERVED, *(str(f["path"]) for f in json.loads(data).get("files", []))}
    except (ValueError, TypeError, KeyError, AttributeError):
        return {MANIFEST, RESERVED}  # damaged: `tracebank verify` names it; nothing here is removed


def sweep_remote(wh: Warehouse, remove: Remove, now: float, min_age_s: float) -> None:
    """Remove from ``wh``'s store what crashed writers left (see the module docstring)."""
    with remote_errors(wh.remote):
        folders: dict[str, list[StoredFile]] = defaultdict(list)
        claims: dict[str, list[StoredFile]] = defaultdict(list)
        for f in wh.remote.walk(""):
            if (found := commit_folder(f.path)) is not None:
                folders[found[0]].append(f)
            elif f.path.startswith("claims/"):
                claims[f.path.rpartition("/")[0]].append(f)
        committed = {k: _listed(wh, k) for k in folders}
        old = lambda fs: all(now - f.mtime >= min_age_s for f in fs)  # noqa: E731
        for folder, files in folders.items():
            listed = committed[folder]
            retired_silver = (
                folder.startswith("silver/") and committed.get(f"collections/{folder[7:]}") is None
            )
            if (listed is None or retired_silver) and old(files):
                for f in files:
                    remove(f)
            elif listed is not None:
                for f in files:
                    if f.path.rpartition("/")[2] not in listed and old([f]):
                        remove(f)
        for files in claims.values():
            newest = max((f.path.rpartition("/")[2].partition(".")[0] for f in files), default="")
            for f in files:
                if f.path.rpartition("/")[2].partition(".")[0] < newest and old([f]):
                    remove(f)
