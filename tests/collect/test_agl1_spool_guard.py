"""A bad file in a 1.0 spool is moved aside with a one-line reason; the rest of the spool is committed."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tracebank.collect import SpoolSource, collect
from tracebank.collect.agl1_hook import SPOOL_FORMAT
from tracebank.collect.agl1_spool import REJECTED, spool_files
from tracebank.collect.config import CollectConfig
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.query import run_sql

from tests.collect.helpers import TRACEBANK


def entry(rid: str) -> dict:
    """A small succeeded spool entry, as the hook writes it."""
    return {
        "format": SPOOL_FORMAT,
        "source": "hook",
        "rollout_id": rid,
        "attempt_id": "0",
        "state": "succeeded",
        "events_complete": True,
        "rollout": {"rollout_id": rid, "is_train": True, "status": {"state": "succeeded"}},
        "events_by_attempt": {"0": [{"event_type": "model_request", "timestamp": 1.5, "data": {"x": 1}}]},
    }


def good_spool(folder, n=2):
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (folder / f"good{i}.json").write_text(json.dumps(entry(f"g{i}")))


def deep(levels: int) -> str:
    return "[" * levels + "]" * levels


def without(key):
    data = entry("bad")
    del data[key]
    return json.dumps(data)


def with_event(event):
    data = entry("bad")
    data["events_by_attempt"]["0"].append(event)
    return json.dumps(data)


BAD = {
    "no_rollout_id": (without("rollout_id"), "`rollout_id` is missing"),
    "events_not_object": (json.dumps({**entry("bad"), "events_by_attempt": [1]}), "not an object"),
    "event_not_object": (with_event("hello"), "event 1 is not an object"),
    "timestamp_yesterday": (with_event({"timestamp": "yesterday"}), "`timestamp` is not a number"),
    "huge_int_timestamp": (with_event({"timestamp": 10**400}), "`timestamp` is not a number"),
    "deep_in_data": (with_event({"data": json.loads(deep(200))}), "nested deeper than"),
    "too_deep_to_parse": (deep(100_000), "nested too deeply"),
    "not_json": ("{'rollout_id': 'r1',", "not JSON"),
}


def collect_cli(wh, spool):
    """`tracebank collect --spool` as a user runs it: a fresh process, its output as text."""
    return subprocess.run(
        [*TRACEBANK, "--warehouse", str(wh.root), "collect", "--spool", str(spool)],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_spool_file_is_moved_aside_and_the_rest_committed(wh, tmp_path, name):
    text, reason = BAD[name]
    spool = tmp_path / "spool"
    good_spool(spool)
    (spool / "bad.json").write_text(text)
    result = collect(SpoolSource(spool), wh)
    assert result.committed and result.counts["rollouts"] == 2 and result.counts["rejected"] == 1
    (warning,) = result.warnings
    assert warning.startswith("spool file bad.json rejected: ") and reason in warning and "\n" not in warning
    assert spool_files(spool) == [] and (spool / REJECTED / "bad.json").read_text() == text
    assert run_sql(wh, "SELECT count(*) AS n FROM events").to_pylist() == [{"n": 2}]


def test_non_regular_files_are_refused_unopened_through_the_cli(wh, tmp_path):
    spool = tmp_path / "spool"
    good_spool(spool)
    os.mkfifo(spool / "fifo.json")  # opening it for reading would wait for a writer for ever
    (spool / "folder.json").mkdir()
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps(entry("linked")))
    (spool / "link.json").symlink_to(outside)
    run = collect_cli(wh, spool)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("collected ") and " 2 new rollouts" in run.stdout
    warnings = [line for line in run.stderr.splitlines() if line.startswith("Warning: spool file")]
    assert len(warnings) == 3 and all("not a regular file" in w for w in warnings)
    assert sorted(p.name for p in (spool / REJECTED).iterdir()) == ["fifo.json", "folder.json", "link.json"]
    assert outside.read_text() == json.dumps(entry("linked"))  # the link was moved, not followed
    assert "Traceback" not in run.stderr


def test_collect_shows_a_hostile_spool_file_name_with_its_control_characters_visible(wh, tmp_path):
    """A spool file named with escape sequences (a title change, a screen clear) is named in
    collect's warning with them made visible: nothing reaches the terminal raw."""
    spool = tmp_path / "spool"
    good_spool(spool)
    hostile = "x\x1b]0;owned\x07\x1b[2J\r.json"
    (spool / hostile).write_text("{not json")
    run = collect_cli(wh, spool)
    assert run.returncode == 0, run.stderr
    (warning,) = [line for line in run.stderr.splitlines() if line.startswith("Warning: spool file")]
    assert "x\u241b]0;owned\u2407\u241b[2J\u240d.json rejected: " in warning
    assert not any(ch in run.stderr + run.stdout for ch in "\x1b\x07\r")


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
FIELDS = [
    ("rollout_id",),
    ("attempt_id",),
    ("state",),
    ("rollout",),
    ("rollout", "status"),
    ("rollout", "status", "created_at"),
    ("rollout", "metadata"),
    ("rollout", "input"),
    ("events_by_attempt",),
    ("events_by_attempt", "0"),
    ("events_by_attempt", "0", 0),
    ("events_by_attempt", "0", 0, "timestamp"),
    ("events_by_attempt", "0", 0, "event_type"),
    ("events_by_attempt", "0", 0, "data"),
]


def replaced(path, value):
    data = entry("bad")
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return data


def tree(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=JSON | st.builds(replaced, st.sampled_from(FIELDS), JSON))
def test_any_json_in_a_spool_file_is_committed_or_rejected(tmp_path_factory, doc):
    base = tmp_path_factory.mktemp("prop")
    spool, root = base / "spool", base / "wh"
    good_spool(spool, 1)
    (spool / "doc.json").write_text(json.dumps(doc))
    wh = Warehouse(root).init()
    result = collect(SpoolSource(spool), wh, CollectConfig(statuses=("succeeded", "failed")))
    counts = result.counts
    assert result.committed and 1 <= counts["rollouts"] <= 2
    assert counts["rollouts"] + counts.get("rejected", 0) + counts["filtered_out"] <= 2
    rejected = (spool / REJECTED / "doc.json").exists()
    assert counts.get("rejected", 0) == rejected == any("doc.json rejected" in w for w in result.warnings)
    assert all("\n" not in w for w in result.warnings)
    assert set(os.listdir(base)) == {"spool", "wh"}  # nothing written beside the spool and warehouse
    assert {p.name for p in spool.iterdir()} <= {REJECTED, "doc.json"}  # good0 was committed
