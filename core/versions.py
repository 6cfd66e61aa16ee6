"""Installed versions of distributions, read from package metadata (nothing is imported).

Manifests and run records note which tracebank and which libraries wrote them; this is the
one reader of those versions.
"""

from __future__ import annotations

from collections.abc import Iterable

#: What a record says when tracebank runs from a source tree that was never installed.
UNKNOWN = "unknown"


def installed_version(dist: str) -> str | None:
    """The installed version of distribution ``dist``, or None when it is not installed."""
    # Imported here: importlib.metadata costs more than the rest of the CLI's start.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def installed_versions(dists: Iterable[str]) -> dict[str, str | None]:
    """``{dist: version or None}`` for each of ``dists``, in order."""
    return {dist: installed_version(dist) for dist in dists}


def tracebank_version() -> str:
    """The installed tracebank's version, ``unknown`` when it is not installed."""
    return installed_version("tracebank") or UNKNOWN
