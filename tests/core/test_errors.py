"""`core.errors.first_line`: the one line of an exception a library raised."""

from __future__ import annotations

from tracebank.core.errors import first_line


def test_the_first_line_of_the_message_or_the_type_name():
    exc = ValueError("  bad header\nTraceback-like detail\nmore  ")
    assert first_line(exc) == "bad header"
    assert first_line(exc, with_type=True) == "ValueError: bad header"
    assert first_line(OSError()) == "OSError"
    assert first_line(KeyError(""), with_type=True) == "KeyError: ''"
    assert first_line(RuntimeError("   "), with_type=True) == "RuntimeError"
