"""Trace text on a real pseudo-terminal: escape sequences are shown, never obeyed.

A rollout whose messages, span names and ids hold a window-title OSC (``ESC ] 0;title BEL``),
a screen clear (``ESC [2J``), an OSC 8 hyperlink, ``\\r``, a C1 CSI and a bidi override is
collected; `show`, `sql` (table and vertical) and an error quoting those ids are run on a pty
(output post-processing off, so every CR seen is the program's own) and must print none of
the raw control bytes; csv and jsonl keep the values exact.
"""

from __future__ import annotations

import csv
import io
import json
import os
import select
import subprocess
import sys
import termios

import pytest
from tracebank.core import events as ev
from tracebank.core.text import visible

from tests.fixtures.bronze import commit_collection
from tests.fixtures.proxy_spans import Call, call_spans, plain_span, reward_span
from tracebank.cli.progress import Progress

HOSTILE = (
    "A\x1b]0;pwned title\x07B\x1b[2JC\x1b]8;;http://evil.example/\x1b\\click me\x1b]8;;\x1b\\D"
    "\rE\x9b31mF\x1b[1;1H\u202egnp.exe\x07G"
)
RAW = ("\x1b", "\x07", "\r", "\x9b", "\u202e")
EVIL_IDS = ("ro-evil\x1b]0;one\x07", "ro-evil\x1b[2Jtwo")


@pytest.fixture
def hostile_wh(wh):
    call = Call(prompt_ids=[1, 2, 3], response_ids=[4, 5], messages=[{"role": "user", "content": HOSTILE}])
    call.reply = f"reply {HOSTILE}"
    spans = call_spans("ro-1", "at-1", 1, call, 1_700_000_000.0) + [
        reward_span("ro-1", "at-1", 2, 1.0, 1_700_000_001.0)
    ]
    spans += [
        plain_span(rid, "at-x", 1, f"tool {HOSTILE}", {"text": HOSTILE}, 1_700_000_002.0) for rid in EVIL_IDS
    ]
    commit_collection(wh, spans)
    return wh


def cli_args(wh, *args: str) -> list[str]:
    return ["--warehouse", str(wh.root), *args]


def _on_pty(*args: str) -> tuple[int, str]:
    """Run ``tracebank ARGS`` with stdout and stderr on a pseudo-terminal; (exit code, all it wrote)."""
    master, slave = os.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[1] &= ~termios.OPOST  # no "\n" -> "\r\n": every CR read back is one the program wrote
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracebank.cli.main", *args], stdin=slave, stdout=slave, stderr=slave
    )
    os.close(slave)
    out = b""
    while True:
        ready, _, _ = select.select([master], [], [], 120)
        if not ready:
            proc.kill()
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the program closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    return proc.wait(), out.decode("utf-8", errors="replace")


def _assert_shown_not_obeyed(text: str) -> None:
    assert not [c for c in RAW if c in text], ascii(text)
    assert "␛]0;pwned title␇B␛[2JC␛]8;;http://evil.example/␛\\click me" in text, text


def test_show_prints_no_control_characters_on_a_terminal(hostile_wh):
    code, out = _on_pty(*cli_args(hostile_wh, "show", "ro-1"))
    assert code == 0, out
    _assert_shown_not_obeyed(out)
    assert "  user: " + visible(HOSTILE) in out.splitlines()


@pytest.mark.parametrize("fmt", ["table", "vertical"])
def test_sql_readable_formats_print_no_control_characters(hostile_wh, fmt):
    sql = "SELECT name, attributes ->> 'text' AS text, rollout_id FROM spans WHERE name LIKE 'tool%'"
    code, out = _on_pty(*cli_args(hostile_wh, "sql", sql, "--format", fmt, "--max-width", "0"))
    assert code == 0, out
    _assert_shown_not_obeyed(out)
    code, out = _on_pty(*cli_args(hostile_wh, "sql", "SELECT content FROM messages", "--format", fmt))
    assert code == 0 and not [c for c in RAW if c in out], ascii(out)


def test_a_cut_value_cannot_leave_an_escape_sequence_open(hostile_wh):
    code, out = _on_pty(*cli_args(hostile_wh, "sql", "SELECT content FROM messages", "--max-width", "4"))
    assert code == 0 and "\x1b" not in out and "A␛]…" in out, ascii(out)


def test_an_error_quoting_trace_ids_stays_one_visible_line(hostile_wh):
    code, out = _on_pty(*cli_args(hostile_wh, "show", "ro-evil"))
    assert code != 0
    assert out.startswith("Error: 'ro-evil' matches 2 rollouts (ro-evil␛[2Jtwo, ro-evil␛]0;one␇, ...)"), (
        ascii(out)
    )
    assert out.count("\n") == 1 and not [c for c in RAW if c in out]


def test_machine_formats_keep_values_exact(hostile_wh):
    sql = "SELECT attributes ->> 'text' AS text FROM spans WHERE name LIKE 'tool%' LIMIT 1"
    out = subprocess.run(
        [sys.executable, "-m", "tracebank.cli.main", *cli_args(hostile_wh, "sql", sql, "--format", "jsonl")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert json.loads(out) == {"text": HOSTILE}
    out = subprocess.run(
        [sys.executable, "-m", "tracebank.cli.main", *cli_args(hostile_wh, "sql", sql, "--format", "csv")],
        capture_output=True,
        check=True,
    ).stdout.decode()
    assert list(csv.reader(io.StringIO(out, newline=""))) == [["text"], [HOSTILE]]


def test_progress_lines_show_control_characters():
    stream = io.StringIO()
    Progress(stream, live=False, clock=lambda: 0.0)(
        ev.Collected(summary=f"collected {HOSTILE}", collection_id=None)
    )
    text = stream.getvalue()
    assert not [c for c in RAW if c in text], ascii(text)
    assert "␛]0;pwned title␇B␛[2J" in text
