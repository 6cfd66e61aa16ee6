"""Keeping credentials out of the archive.

LiteLLM copies request metadata into span attributes: the caller's API key
(``llm.api_key``), request headers inside ``metadata.requester_metadata`` (a
Python repr of a dict, ``authorization: Bearer sk-...`` included), and so on.
Three rules, applied to every attribute value:

1. A value under a key that names a credential (API key, authorization header,
   password, secret, access/refresh/session token, cookie) becomes
   ``[REDACTED]`` whole. Keys that only *mention* tokens are not credentials:
   ``*token_ids`` (the training data), ``*_tokens`` usage counts, ``*_hash`` /
   ``*_alias`` / ``*_id`` labels of a key.
2. Inside a string, a quoted ``'key': 'value'`` / ``"key": "value"`` pair (a
   repr or JSON dict of headers) whose key names a credential keeps its key and
   loses its value; ``key=value`` query parameters likewise.
3. Bare ``Bearer <token>`` / ``Basic <token>`` and ``sk-...`` style keys are
   replaced wherever they appear.

The rest of every value is kept byte for byte, so a repr that held a secret
still parses after redaction.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Any

REDACTED = "[REDACTED]"

# Matched against the last dotted segment of a key, lower-cased, '-' read as '_'.
_SECRET_KEY = re.compile(
    r"(api_?key|apikey|authorization|auth_header|password|passwd|passphrase|secret"
    r"|private_key|credential|cookie|(^|_)token$|(access|refresh|id|auth|bearer|session|api"
    r"|oauth|csrf|hf|github|x_auth)_?token$)"
)
# A key that mentions a credential word but labels, counts or lists something else.
_NOT_SECRET = re.compile(
    r"(token_ids|_tokens|_hash|_alias|_id|_ids|_email|_route|_spend|_budget|_count|_type|_name)$"
)

# What must follow a credential word for a string to hold a pair worth scrubbing: the rest of
# the key, an optional closing quote, then ': "' (a dict) or '=' (a query string).
_PAIR_TAIL = re.compile(r"""[\w-]*['"]?\s*(?::\s*['"]|=)""")
_PAIR_WORDS = (
    "key",
    "authorization",
    "header",
    "passw",
    "passphrase",
    "secret",
    "token",
    "cookie",
    "credential",
)
_WORDS = (
    "key",
    "auth",
    "header",
    "passw",
    "passphrase",
    "secret",
    "token",
    "cookie",
    "credential",
    "bearer",
    "basic",
    "sk-",
)
_QUOTED_PAIR = re.compile(
    r"""(?P<q>['"])(?P<key>[^'"\\\n]{1,200})(?P=q)(?P<sep>\s*:\s*)"""
    r"""(?P<vq>['"])(?P<val>(?:\\.|(?!(?P=vq))[^\\])*)(?P=vq)"""
)
_QUERY_PAIR = re.compile(r"(?i)\b(?P<key>[a-z_][a-z0-9_.-]{0,60})=(?P<val>[^&\s'\",;]+)")
_BEARER = re.compile(r"(?i)\b(?P<scheme>bearer|basic)\s+(?P<val>[A-Za-z0-9._~+/=-]{8,})")
_SK = re.compile(r"\bsk-[A-Za-z0-9_-]{8,}")


def _maybe_secret(low: str) -> bool:
    """Plain substring tests on lower-cased text: far cheaper than a case-blind regex scan."""
    for word in _WORDS:  # noqa: SIM110 - a plain loop: any() over a generator costs twice as much
        if word in low:
            return True
    return False


def _needs_scrub(low: str) -> bool:
    """Whether lower-cased text holds a credential pattern (``str.find`` for the words, then one
    anchored match after each hit: a case-blind regex scan of long message text costs ~50x more)."""
    return next(_pattern_starts(low), None) is not None


def _pattern_starts(low: str) -> Iterator[int]:
    """Every position where :func:`_needs_scrub` would see a credential pattern begin."""
    i = low.find("sk-")
    while i != -1:
        yield i
        i = low.find("sk-", i + 1)
    for scheme in ("bearer", "basic"):
        i = low.find(scheme)
        while i != -1:
            nxt = i + len(scheme)
            if nxt < len(low) and low[nxt].isspace():
                yield i
            i = low.find(scheme, nxt)
    for word in _PAIR_WORDS:
        i = low.find(word)
        while i != -1:
            if _PAIR_TAIL.match(low, i + len(word)):
                yield i
            i = low.find(word, i + 1)


def _strings_to_scrub(keys: list[str], lows: list[str]) -> Collection[str]:
    """The keys whose (lower-cased) strings may hold a credential pattern, from one pass over
    all of them joined by newlines. Each pattern found in one string is found at the same place
    in the joined text (none of them needs the end of its string), so every string that
    :func:`_needs_scrub` flags is among those returned; :meth:`Redactor.scrub_text` checks each
    again and leaves a false alarm (a pattern across two strings) unchanged."""
    joined = "\n".join(lows)
    if not _maybe_secret(joined):
        return ()
    if len(lows) == 1:
        return keys if _needs_scrub(joined) else ()
    ends = list(itertools.accumulate(len(low) + 1 for low in lows))  # one past each newline
    return {keys[bisect.bisect_right(ends, i)] for i in _pattern_starts(joined)}


@functools.lru_cache(maxsize=4096)
def is_secret_key(key: str) -> bool:
    """Whether an attribute key names a credential (``llm.api_key`` yes, ``prompt_token_ids`` no)."""
    last = key.rsplit(".", 1)[-1].strip().lower().replace("-", "_")
    return bool(_SECRET_KEY.search(last)) and not _NOT_SECRET.search(last)


@dataclass
class Redactor:
    """Redacts values in place and counts how many it changed."""

    count: int = 0

    def scrub_text(self, text: str) -> str:
        """``text`` with embedded credentials replaced (rules 2 and 3)."""
        if not _needs_scrub(text.lower()):
            return text
        out = _QUOTED_PAIR.sub(self._quoted, text)
        out = _QUERY_PAIR.sub(self._query, out)
        out = _BEARER.sub(self._bearer, out)
        out = _SK.sub(self._sk, out)
        if out != text:
            self.count += 1
        return out

    def value(self, key: str | None, value: Any) -> Any:
        """``value`` (found under ``key``) redacted; dicts and lists are walked."""
        if key is not None and is_secret_key(key) and value not in (None, "", REDACTED):
            self.count += 1
            return REDACTED
        if value is None or isinstance(value, int | float):
            return value
        if isinstance(value, str):
            return self.scrub_text(value)
        if isinstance(value, dict):
            return {k: self.value(str(k), v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(None, v) for v in value]
        return value

    def mapping(self, attrs: dict[str, Any] | None) -> dict[str, Any] | None:
        """An attribute dict with every value redacted."""
        if not attrs:
            return attrs
        # One scan over all of a mapping's strings, joined, finds which of them may need the
        # regexes; most spans (HTTP, rewards, token lists) have none, and a LiteLLM span has
        # one or two among a dozen. Secret-keyed values are replaced whole, so not scanned.
        keys: list[str] = []
        lows: list[str] = []
        walk = False  # a secret key or a nested value: the values need the loop below
        for key, value in attrs.items():
            if is_secret_key(key):
                walk = True
            elif isinstance(value, str):
                keys.append(key)
                lows.append(value.lower())
            elif not (value is None or isinstance(value, int | float)):
                walk = True
        scrub = _strings_to_scrub(keys, lows) if keys else ()
        if not walk and not scrub:
            return attrs  # nothing in it to redact
        out: dict[str, Any] = {}
        for key, value in attrs.items():
            if is_secret_key(key):
                out[key] = self.value(key, value)
            elif isinstance(value, str):
                out[key] = self.scrub_text(value) if key in scrub else value
            elif value is None or isinstance(value, int | float):
                out[key] = value  # what value() returns for them, without the call
            else:
                out[key] = self.value(key, value)
        return out

    def span(self, span: dict[str, Any]) -> dict[str, Any]:
        """A Span dict with its attributes, event and link attributes and resource redacted."""
        span["attributes"] = self.mapping(span.get("attributes"))
        for event in span.get("events") or ():
            event["attributes"] = self.mapping(event.get("attributes"))
        for link in span.get("links") or ():
            link["attributes"] = self.mapping(link.get("attributes"))
        resource = span.get("resource")
        if resource:
            resource["attributes"] = self.mapping(resource.get("attributes"))
        return span

    # re.sub callbacks -------------------------------------------------------------

    def _quoted(self, m: re.Match[str]) -> str:
        if not is_secret_key(m["key"]) or m["val"] in ("", REDACTED):
            return m.group(0)
        return f"{m['q']}{m['key']}{m['q']}{m['sep']}{m['vq']}{REDACTED}{m['vq']}"

    def _query(self, m: re.Match[str]) -> str:
        if not is_secret_key(m["key"]) or m["val"] == REDACTED:
            return m.group(0)
        return f"{m['key']}={REDACTED}"

    def _bearer(self, m: re.Match[str]) -> str:
        if m["val"] == REDACTED:
            return m.group(0)
        return f"{m['scheme']} {REDACTED}"

    def _sk(self, m: re.Match[str]) -> str:
        return REDACTED
