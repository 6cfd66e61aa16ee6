"""The 1.0 trainer hook: every finished rollout reaches the spool before the trainer deletes it."""

from __future__ import annotations

import ast
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tracebank.collect import agl1_hook
from tracebank.collect.agl1_spool import SpoolError, read_entry, read_spool, spool_files

from tests.fixtures.agl1_server import ROUND_PROMPTS, HttpError

HOOK = Path(agl1_hook.__file__)


def test_trainer_round_spools_every_rollout_then_the_server_forgets_them(agl1_round):
    spool, result, server = agl1_round
    completed = {c["rollout_id"]: c for c in result["completed"]}
    assert len(completed) == len(ROUND_PROMPTS)
    for rid in completed:  # the trainer deleted them: the spool is all that is left
        with pytest.raises(HttpError) as err:
            server.request("GET", f"/api/rollouts/{rid}")
        assert err.value.status == 404
    entries = {e.data["rollout_id"]: e for e in read_spool(spool)}
    assert set(entries) == set(completed)
    for rid, done in completed.items():
        entry = entries[rid]
        assert entry.data["state"] == done["rollout_state"]
        assert entry.data["events_complete"] is True
        # the same events the trainer read, in the same order, whole
        assert entry.events() == done["events"], rid
        assert entry.data["rollout"]["input"] == done["input"]


def test_failed_rollouts_keep_their_events_through_the_server_url(agl1_round):
    spool, result, _ = agl1_round
    failed = [c for c in result["completed"] if c["rollout_state"] == "failed"]
    assert len(failed) == sum("fail" in p for p in ROUND_PROMPTS) == 2
    for done in failed:
        entry = read_entry(spool / agl1_hook.spool_name(done["rollout_id"], "0"))
        assert entry.data["state"] == "failed" and entry.events() == done["events"]
        assert [e["event_type"] for e in entry.events()].count("model_request") == 2


def test_hook_time_is_small_next_to_the_trainer_poll(agl1_round):
    """Recorded, not a speed goal (make bench measures it): one call per finished rollout."""
    _, result, _ = agl1_round
    assert len(result["hook_seconds"]) == len(ROUND_PROMPTS)
    # on_failed also asks the server for the events: still far below the 1 s poll of 1.0's loop
    assert max(result["hook_seconds"]) < 1.0


def test_the_hook_loads_in_the_10_env_through_agentlightning(agl1_env, tmp_path):
    code = (
        "import sys; from agentlightning.hooks import load_hooks, RolloutHooks\n"
        f"h = load_hooks({str(HOOK)!r}); h.on_startup()\n"
        "print(type(h).__name__, isinstance(h, RolloutHooks), h.spool,"
        " any(m.startswith('tracebank') for m in sys.modules))\n"
    )
    out = subprocess.run(
        [str(agl1_env.python), "-P", "-c", code],
        capture_output=True,
        text=True,
        env={"TRACEBANK_SPOOL": str(tmp_path / "s"), "PATH": "/usr/bin:/bin"},
        check=True,
    )
    assert out.stdout.split() == ["TracebankSpoolHooks", "True", str(tmp_path / "s"), "False"]
    assert (tmp_path / "s").is_dir()


def test_the_hook_imports_only_the_standard_library():
    tree = ast.parse(HOOK.read_text())
    top = {
        alias.name.split(".")[0] if isinstance(node, ast.Import) else (node.module or "").split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (node.names if isinstance(node, ast.Import) else [node])
    }
    assert top - {"__future__", "agentlightning"} <= set(sys.stdlib_module_names)
    assert "agentlightning" in top  # the base class, imported inside a function


WRITER = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("h", sys.argv[1]); h = importlib.util.module_from_spec(spec)
spec.loader.exec_module(h)
from pathlib import Path
big = [{"event_type": "model_request", "data": {"response": {"prompt_token_ids": list(range(20000))}}}]
i = 0
while True:
    rollout = {"rollout_id": f"r{i:05d}", "status": {"state": "succeeded", "last_attempt_id": "0"}}
    h.write_entry(Path(sys.argv[2]), h.spool_entry(rollout, {"0": big}, "hook", True))
    print(i, flush=True); i += 1
"""


def test_a_hook_killed_mid_write_leaves_only_complete_entries(agl1_env, tmp_path):
    spool = tmp_path / "spool"
    proc = subprocess.Popen(
        [str(agl1_env.python), "-c", WRITER, str(HOOK), str(spool)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    while int(proc.stdout.readline() or -1) < 5:
        pass
    time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    entries = read_spool(spool)  # parses every complete file; a torn write is a .tmp- file
    assert len(entries) >= 6
    assert [e.data["rollout_id"] for e in entries] == [f"r{i:05d}" for i in range(len(entries))]
    assert all(len(e.events()[0]["data"]["response"]["prompt_token_ids"]) == 20000 for e in entries)
    assert {p.name for p in spool.iterdir()} - {p.name for p in spool_files(spool)} <= {
        p.name for p in spool.iterdir() if agl1_hook.TMP_MARK in p.name
    }


def test_a_foreign_file_in_the_spool_is_named(tmp_path):
    (tmp_path / "notes.json").write_text(json.dumps({"hello": 1}))
    with pytest.raises(SpoolError, match="notes.json"):
        read_spool(tmp_path)
