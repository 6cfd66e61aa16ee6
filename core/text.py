"""Text from traces made safe for a terminal: control characters shown, never obeyed.

Every byte of trace text is hostile (docs/SECURITY.md): a message holding ``ESC ] 0;title BEL``
retitles the window, ``ESC [2J`` clears the screen, an OSC 8 sequence turns text into a link
to elsewhere, ``\\r`` or cursor moves overwrite what was printed, and a cut value can leave an
escape sequence open that hides everything after it. What tracebank prints for a person
(``show``, ``sql`` table and vertical, progress lines, error messages) goes through
:func:`visible`; machine formats (csv, json, jsonl) and files keep values exact.

C0 controls and DEL become their Unicode "control pictures" (ESC is ``␛``, BEL ``␇``, CR
``␍``): one column each, so tables stay aligned and the sequence stays readable
(``␛[2J``). C1 controls (U+0080..U+009F: a terminal may read U+009B as ESC [) and the
bidirectional overrides and isolates that reorder what is shown (U+202A..U+202E,
U+2066..U+2069), and the line and paragraph separators, are written as ``\\x9b`` /
``\\u202e``. Newline and tab are kept where the layout keeps them (``keep``).

It lives in ``warehouse`` because that is the one package the CLI and every stage may
import (``view`` uses it for ``show``; ``tracebank.cli`` for ``sql``, progress and errors).
"""

from __future__ import annotations

import functools

#: What multi-line layouts keep: newlines and tabs (tabs only move the cursor right).
LINES = "\n\t"
_C0 = range(0x20)
_DEL = 0x7F
_C1 = range(0x80, 0xA0)
_FORMAT_CONTROLS = (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x2028, 0x2029)


@functools.lru_cache(maxsize=8)
def _table(keep: str) -> dict[int, str]:
    table = {c: chr(0x2400 + c) for c in _C0 if chr(c) not in keep}
    table[_DEL] = "\u2421"
    table.update({c: f"\\x{c:02x}" for c in _C1})
    table.update({c: f"\\u{c:04x}" for c in _FORMAT_CONTROLS})
    return table


def visible(text: str, keep: str = LINES) -> str:
    """``text`` with every control character made visible, except those in ``keep``
    (``keep=""`` for a value that must stay on one line, such as an error message)."""
    return text.translate(_table(keep))


def loss(value: object) -> str:
    """A loss with four decimals, ``n/a`` when there is none (progress lines and run summaries)."""
    return f"{value:.4f}" if isinstance(value, int | float) else "n/a"
