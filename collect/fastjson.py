"""JSON for the span path: orjson where it gives exactly what ``json`` would, ``json`` elsewhere.

Every span is parsed once (the store's answer) and written back as seven JSON
columns; with the standard library that is most of collect's own CPU time, and
on a small machine that time is taken from the store server. orjson does both
several times faster, but it differs from ``json`` at the edges: it reads
integers beyond 64 bits as floats, refuses NaN / Infinity and lone surrogates,
and writes NaN as null. So :func:`loads` says whether a value is *plain* (came
through orjson, hence holds only str keys, finite floats, 64-bit ints and valid
text), and only plain values are written with orjson; anything else, and
everything when orjson is not installed, goes through ``json`` as before.

What orjson writes is compact (no spaces after ``,`` and ``:``) and keeps
non-ASCII text as UTF-8 instead of ``\\u`` escapes; ``json.loads`` of it gives
the same value as of ``warehouse.bronze.to_json``'s text, keys sorted alike.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

try:
    import orjson
except ImportError:  # pragma: no cover - orjson is a dependency; json keeps collect working
    orjson = None  # type: ignore[assignment]

# 19 digits in a row may be an integer beyond 64 bits, which orjson would turn into a float.
# Found by mapping every digit to "0" and searching for 19 of them: ~1 us per KB, where the
# regex [0-9]{19} costs ~8 us per KB of span text (token-id lists are mostly digits).
_DIGITS_TO_ZERO = bytes.maketrans(b"0123456789", b"0" * 10)
_LONG_DIGITS = b"0" * 19


def _long_digits(raw: bytes) -> bool:
    return _LONG_DIGITS in raw.translate(_DIGITS_TO_ZERO)


# bronze.to_json's exact settings, built once: json.dumps would build an encoder per call.
_encode_exact = json.JSONEncoder(sort_keys=True, default=str, allow_nan=True).encode


def loads(raw: bytes) -> tuple[Any, bool]:
    """The value of a JSON document, and whether it is plain (safe for :func:`encoder` ``(True)``)."""
    if orjson is not None and not _long_digits(raw):
        try:
            return orjson.loads(raw), True
        except orjson.JSONDecodeError:
            pass  # NaN, Infinity, a lone surrogate...: json reads them
    return json.loads(raw), False


def dumps(value: Any) -> bytes:
    """A request body (any valid JSON will do)."""
    if orjson is not None:
        return orjson.dumps(value)
    return json.dumps(value).encode()


def _exact(value: Any) -> str | None:
    if value is None:
        return None
    if not value and isinstance(value, list | dict):
        return "[]" if isinstance(value, list) else "{}"  # most events / links: no encoder call
    return _encode_exact(value)


def _fast(value: Any) -> str | None:
    if value is None:
        return None
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:  # orjson.JSONEncodeError; e.g. nesting deeper than orjson writes
        return _encode_exact(value)


def encoder(plain: bool) -> Callable[[Any], str | None]:
    """``value -> JSON text`` (None stays None): orjson for plain values, else bronze.to_json's."""
    return _fast if plain and orjson is not None else _exact
