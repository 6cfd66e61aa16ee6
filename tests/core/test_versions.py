"""`core.versions`: the one reader of installed distribution versions."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

from tracebank.core.versions import UNKNOWN, installed_version, installed_versions, tracebank_version

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("collect", "loop", "rescore", "serve", "train", "transform", "view", "warehouse")
#: Loaded on its own inside Agent Lightning 1.0's environment, where tracebank is not installed:
#: it may import only the standard library.
STANDALONE = {ROOT / "collect" / "agl1_hook.py"}


def test_versions_of_installed_and_missing_distributions():
    assert installed_version("pyarrow") == metadata.version("pyarrow")
    assert installed_version("no-such-distribution-tracebank") is None
    assert installed_versions(["no-such-distribution-tracebank", "pyarrow"]) == {
        "no-such-distribution-tracebank": None,
        "pyarrow": metadata.version("pyarrow"),
    }
    assert tracebank_version() in (metadata.version("tracebank"), UNKNOWN)


def test_no_stage_reads_package_metadata_itself():
    """A second reader drifts (one said ``unknown``, another left the library out, a third None)."""
    reader = re.compile(r"metadata\.version\(|from importlib.metadata import|PackageNotFoundError")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path not in STANDALONE
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if reader.search(line.split("#", 1)[0]) and "``" not in line
    ]
    assert found == []
