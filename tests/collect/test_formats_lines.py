"""The bounded JSON reader every format's parser uses: hostile lines are BadRecords, the rest read."""

from __future__ import annotations

import os

import pytest
from tracebank.collect.conversation import BadRecord
from tracebank.collect.formats import FORMATS, parser
from tracebank.collect.formats.lines import json_document, json_lines


def test_bad_lines_are_named_and_the_rest_read(tmp_path):
    deep = "[" * 200 + "]" * 200
    path = tmp_path / "x.jsonl"
    path.write_bytes(
        b'{"a": 1}\n\nnot json\n'
        + ("x" * 5000).encode()
        + b'\n[1, 2]\n{"d": '
        + deep.encode()
        + b'}\n{"b": 2}'
    )
    out = list(json_lines(path, limit=1000))
    good = [v for v in out if not isinstance(v, BadRecord)]
    bad = [v.line() for v in out if isinstance(v, BadRecord)]
    assert good == [("x.jsonl:1", {"a": 1}), ("x.jsonl:7", {"b": 2})]
    assert bad[0].startswith("x.jsonl:3: not JSON") and bad[1] == "x.jsonl:4: longer than 1000 bytes"
    assert bad[2] == "x.jsonl:5: not a JSON object (a list)"
    assert bad[3] == "x.jsonl:6: nested deeper than 64 levels"


def test_a_document_too_long_or_a_fifo_is_refused(tmp_path):
    path = tmp_path / "d.json"
    path.write_text('{"a": [1, 2, 3]}')
    assert json_document(path) == {"a": [1, 2, 3]}
    assert json_document(path, limit=4) == BadRecord("d.json", "longer than 4 bytes")
    fifo = tmp_path / "f.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        list(json_lines(fifo))


def test_unknown_format_names_are_refused():
    assert FORMATS == ("chat", "openai", "otlp", "atif")
    with pytest.raises(ValueError, match="unknown format"):
        parser("yaml")
