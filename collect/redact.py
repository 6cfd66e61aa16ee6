"""Keeping credentials out of the archive.

LiteLLM copies request metadata into span attributes: the caller's API key
(``llm.api_key``), request headers inside ``metadata.requester_metadata`` (a
Python repr of a dict, ``authorization: Bearer sk-...`` included), and so on;
an agent's own text can hold a key it was given. Four rules, applied to every
attribute value:

1. A value under a key that names a credential (API key, ``*.key``, ``*_access_key_id``,
   authorization header, password, secret, access/refresh/session token, cookie)
   becomes ``[REDACTED]`` whole. Keys that only *mention* tokens are not credentials:
   ``*token_ids`` (the training data), ``*_tokens`` usage counts, ``*_hash`` /
   ``*_alias`` / ``*_id`` labels of a key, ``cache_key`` and other keys of lookups.
2. Inside a string, a quoted ``'key': 'value'`` / ``"key": "value"`` pair (a repr or
   JSON dict of headers), also inside JSON encoded twice or more (``\\"key\\": ...``),
   whose key names a credential keeps its key and loses its value; so do assignments of
   credential-named variables: ``key=value`` query parameters, ``NAME=value`` and
   ``export NAME="value"`` (shell, ``.env``), ``name: value`` (YAML, INI, headers; the
   name written like a variable, so prose such as "the key: ..." is left alone).
3. The password of URL userinfo (``scheme://user:PASSWORD@host``) is replaced.
4. Bare ``Bearer <token>`` / ``Basic <token>`` and the common token formats are
   replaced wherever they appear: ``sk-`` keys (OpenAI, Anthropic), AWS access key ids,
   Google API keys, GitHub, GitLab, Slack, Hugging Face, Stripe, SendGrid, npm and PyPI
   tokens, JWTs and PEM private key blocks (:data:`TOKEN_FORMATS`).

Where a token may start is decided by what a token cannot contain, not by a plain
look-behind: tokens are ASCII, so any character outside a token's ASCII word characters
ends the word before it (a tab, punctuation, a non-ASCII letter such as ``é``), and so
does an escape sequence of JSON or Python text (``\\n``, ``\\t``, ``\\u00e9``, ``\\xe9``,
at any depth of escaping), whose last character is a letter or digit only by accident.
``task-abcdefgh...`` (``sk-`` inside a word) stays.

:meth:`Redactor.span` covers the span's name and status text besides its attributes,
events, links and resource; collect also passes the store URL it records through
:func:`without_credentials`.

The rest of every value is kept byte for byte, so a repr that held a secret
still parses after redaction.

What cannot be redacted: the token ids. ``prompt_token_ids`` / ``response_token_ids``
are the training data and are kept as they are, so a secret that an agent typed
into a prompt or a model wrote in a reply stays in the ids (and is trained on)
even though the text columns show ``[REDACTED]``. Nor is a secret of a format
this module does not know, under a key that does not name a credential.
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
    r"|private_key|credential|cookie|(^|_)(pass|pwd|token)$|(access|refresh|id|auth|bearer|session|api"
    r"|oauth|csrf|hf|github|x_auth)_?token$|(^|_)key$|accountkey$)"
)
# A key that mentions a credential word but labels, counts or lists something else.
_NOT_SECRET = re.compile(
    r"(token_ids|_tokens|_hash|_alias|_id|_ids|_email|_route|_spend|_budget|_count|_type|_name"
    r"|(cache|sort|partition|primary|foreign|routing|idempotency|dedup|lookup|group|row|index"
    r"|public|kv|prefix|shard|hash|join|group_by|order)_key)$"
)
# Secret although it ends like a label: an AWS access key id is half of a credential pair.
_ALWAYS_SECRET = re.compile(r"access_key_id$")

# What must follow a credential word for a string to hold a pair worth scrubbing: the rest of
# the key, then an (escaped) closing quote and ': "' (a dict) or '=', or, unquoted, ':' (YAML,
# a header) or '=' (a query string, shell, .env).
_PAIR_TAIL = re.compile(r"""[\w.-]*(?:\\*['"]\s*(?::\s*\\*['"]|=)|\s*(?P<sep>[:=]))""")
# The part of a key before the credential word found in it (``aws_`` of ``aws_secret_access_key``).
_KEY_HEAD = re.compile(r"[a-z0-9_.-]+\Z")
_SEPARATED = re.compile(r"[_.-]")
# Credential names that may stand alone before a colon (``Password: ...``), lower-cased.
_BARE_NAMES = ("password", "passwd", "secret")
# Credential words that, alone before a colon, may be an upper-case NAME (``TOKEN: ...``): in the
# lower-cased text tested first they look like prose, so scrub_text decides on the real case.
_STANDALONE = ("apikey", "token", "pass", "pwd", "secret")
_PAIR_WORDS = (
    "key",
    "authorization",
    "header",
    "pass",
    "pwd",
    "secret",
    "token",
    "cookie",
    "credential",
)
# A URL whose userinfo has a password: scheme://user:password@host.
_USERINFO = re.compile(
    r"(?P<head>[a-z][a-z0-9+.-]*://[^\s/?#@:'\"\\]*:)(?P<val>[^\s/?#@'\"\\]+)@", re.IGNORECASE
)
_USERINFO_AT = re.compile(r"://[^\s/?#@:'\"\\]*:[^\s/?#@'\"\\]+@")

# Token formats, each with the lower-case literal it starts with (the cheap first test). The
# formats follow the issuers' documented prefixes (as detect-secrets and gitleaks match them).
TOKEN_FORMATS: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("sk-",), r"sk-[A-Za-z0-9_-]{8,}", "OpenAI / Anthropic style API key"),
    (("akia",), r"AKIA[0-9A-Z]{16}", "AWS access key id"),
    (("asia",), r"ASIA[0-9A-Z]{16}", "AWS temporary access key id"),
    (("aiza",), r"AIza[0-9A-Za-z_-]{35}", "Google API key"),
    (("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), r"gh[pousr]_[A-Za-z0-9_]{30,}", "GitHub token"),
    (("github_pat_",), r"github_pat_[A-Za-z0-9_]{22,}", "GitHub fine-grained token"),
    (("glpat-",), r"glpat-[A-Za-z0-9_-]{20,}", "GitLab personal access token"),
    (("xox",), r"xox[abposr]-[A-Za-z0-9-]{10,}", "Slack token"),
    (("hooks.slack.com",), r"hooks\.slack\.com/services/[A-Za-z0-9/_-]{20,}", "Slack webhook"),
    (("hf_",), r"hf_[A-Za-z0-9]{30,}", "Hugging Face token"),
    (("sk_live_", "sk_test_", "rk_live_", "rk_test_"), r"[sr]k_(?:live|test)_[0-9A-Za-z]{16,}", "Stripe key"),
    (("sg.",), r"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}", "SendGrid key"),
    (("npm_",), r"npm_[A-Za-z0-9]{36}", "npm token"),
    (("pypi-",), r"pypi-AgE[A-Za-z0-9_-]{50,}", "PyPI token"),
    (("eyj",), r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*", "JWT"),
    (
        ("-----begin",),
        r"-----BEGIN[A-Z ]*PRIVATE KEY(?: BLOCK)?-----(?:.*?-----END[A-Z ]*PRIVATE KEY(?: BLOCK)?-----"
        r"|[A-Za-z0-9+/=\s\\]*)",
        "PEM private key block",
    ),
)
# A token must not continue a longer ASCII word on its left (``task-123`` holds no ``sk-`` key);
# an escape sequence (``\\n``, ``\\u00e9``) ends the word before, although it ends in a letter.
_ESCAPES = (r"\\[nrtbfv0]", r"\\x[0-9a-fA-F]{2}", r"\\u[0-9a-fA-F]{4}", r"\\U[0-9a-fA-F]{8}")
_TOKEN_START = "(?:(?<![A-Za-z0-9_])" + "".join(f"|(?<={esc})" for esc in _ESCAPES) + ")"
_ESCAPE_BEFORE = re.compile("(?:" + "|".join(_ESCAPES) + r")\Z")
_TOKEN = re.compile(
    "|".join(f"{_TOKEN_START}{rx}" for rx in dict.fromkeys(rx for _, rx, _ in TOKEN_FORMATS)),
    re.DOTALL,
)
# Each format anchored, keyed by its literal start, as written: what is replaced.
_TOKEN_EXACT = {word: re.compile(rx, re.DOTALL) for words, rx, _ in TOKEN_FORMATS for word in words}
# The same, anchored and case-blind, for lower-cased text (a superset of what _TOKEN finds).
_TOKEN_AT = {
    word: re.compile(rx, re.IGNORECASE | re.DOTALL) for words, rx, _ in TOKEN_FORMATS for word in words
}
_QUOTED_PAIR = re.compile(
    r"""(?P<q>['"])(?P<key>[^'"\\\n]{1,200})(?P=q)(?P<sep>\s*:\s*)"""
    r"""(?P<vq>['"])(?P<val>(?:\\.|(?!(?P=vq))[^\\])*)(?P=vq)"""
)
# The same pair inside a string that is itself inside JSON: every quote escaped once or more.
# The value ends at the first quote of the same escaping that is not itself escaped further.
_ESCAPED_PAIR = re.compile(
    r"""(?P<q>\\+['"])(?P<key>[^'"\\\n]{1,200})(?P=q)(?P<sep>\s*:\s*)"""
    r"""(?P<vq>\\+['"])(?P<val>.*?)(?<!\\)(?P=vq)"""
)
# ``NAME=value``, ``name: value``, ``export NAME="value"``, ``key=value&...``: the value is quoted
# (as far as the same, equally escaped, quote on that line) or bare (up to a space, quote, comma...).
# The name and the separator are matched first and the value only after a credential name, so a
# value that is not a credential never hides the name that follows it (``a: b_token: SECRET``).
_ASSIGNMENT = re.compile(
    r"(?P<key>[A-Za-z_][A-Za-z0-9_.-]{0,80})(?P<sep>[ \t]*(?::(?![:/])|=(?![=>~]))[ \t]*)"
)
_VALUE = re.compile(r"""(?P<open>\\*["'])(?P<quoted>[^\n]{1,500}?)(?P=open)|(?P<bare>[^\s"'\\,;&]+)""")
# An escape sequence that a key read from escaped text starts with (``\\nPASSWORD=...``).
_KEY_ESCAPE = re.compile(r"[nrtbfv0]|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}")
_BEARER = re.compile(r"(?i)\b(?P<scheme>bearer|basic)\s+(?P<val>[A-Za-z0-9._~+/=-]{8,})")
# The first, cheapest test: a value holding none of these holds nothing to redact.
_WORDS = tuple(
    dict.fromkeys(
        (
            *_PAIR_WORDS,
            "auth",
            "bearer",
            "basic",
            "://",
            *(word for words, _, _ in TOKEN_FORMATS for word in words),
        )
    )
)


def _maybe_secret(low: str) -> bool:
    """Plain substring tests on lower-cased text: far cheaper than a case-blind regex scan."""
    for word in _WORDS:  # noqa: SIM110 - a plain loop: any() over a generator costs twice as much
        if word in low:
            return True
    return False


def token_words(low: str) -> tuple[str, ...]:
    """The literal starts of token formats that lower-cased ``low`` contains (usually none)."""
    return tuple(word for word in _TOKEN_AT if word in low)


def _needs_scrub(low: str, words: tuple[str, ...] | None = None) -> bool:
    """Whether lower-cased text holds a credential pattern (``str.find`` for the words, then one
    anchored match after each hit: a case-blind regex scan of long message text costs ~50x more)."""
    return next(_pattern_starts(low, words), None) is not None


def _pattern_starts(low: str, words: tuple[str, ...] | None = None) -> Iterator[int]:
    """Every position where :func:`_needs_scrub` would see a credential pattern begin.
    ``words``: :func:`token_words` of ``low`` or of a text that contains it, when known."""
    for word in token_words(low) if words is None else words:
        token = _TOKEN_AT[word]
        i = low.find(word)
        while i != -1:
            if token.match(low, i):
                yield i
            i = low.find(word, i + 1)
    for scheme in ("bearer", "basic"):
        i = low.find(scheme)
        while i != -1:
            nxt = i + len(scheme)
            if nxt < len(low) and low[nxt].isspace():
                yield i
            i = low.find(scheme, nxt)
    i = low.find("://")
    while i != -1:
        if _USERINFO_AT.match(low, i):
            yield i
        i = low.find("://", i + 1)
    for word in _PAIR_WORDS:
        i = low.find(word)
        while i != -1:
            tail = _PAIR_TAIL.match(low, i + len(word))
            if tail and not _prose_colon(low, i, word, tail) and _pair_may_hold_secret(low, i, tail):
                yield i
            i = low.find(word, i + 1)


def _prose_colon(low: str, i: int, word: str, tail: re.Match[str]) -> bool:
    """``the key: ...``: the credential word alone before a colon, the cheap common case of prose."""
    if tail["sep"] != ":" or tail.start("sep") != i + len(word) or word in _STANDALONE:
        return False
    return i == 0 or not (low[i - 1].isalnum() or low[i - 1] in "_.-\\")


def _pair_may_hold_secret(low: str, i: int, tail: re.Match[str]) -> bool:
    """Whether the key around a credential word at ``low[i]`` is one whose value is replaced:
    most keys that mention a token (``prompt_token_ids: [...]``, ``max_tokens=``) are not."""
    start = _key_start(low, i)
    end = tail.end("sep") if tail["sep"] else tail.end()
    key = _plain_key(low, start, low[start:end].rstrip("'\" \t:=\\"))
    # An upper-case NAME: looks the same as a word of prose here (lower-cased): scrub_text decides.
    if tail["sep"] == ":" and not (_variable_like(key) or key in _STANDALONE):
        return False
    return is_secret_key(key)


def _strings_to_scrub(keys: list[str], lows: list[str]) -> tuple[Collection[str], tuple[str, ...]]:
    """The keys whose (lower-cased) strings may hold a credential pattern, from one pass over
    all of them joined by newlines. Each pattern found in one string is found at the same place
    in the joined text (none of them needs the end of its string), so every string that
    :func:`_needs_scrub` flags is among those returned; :meth:`Redactor.scrub_text` checks each
    again and leaves a false alarm (a pattern across two strings) unchanged. Also the
    :func:`token_words` of the joined text, which every one of the strings can reuse."""
    joined = "\n".join(lows)
    if not _maybe_secret(joined):
        return (), ()
    words = token_words(joined)
    if len(lows) == 1:
        return (keys if _needs_scrub(joined, words) else ()), words
    ends = list(itertools.accumulate(len(low) + 1 for low in lows))  # one past each newline
    return {keys[bisect.bisect_right(ends, i)] for i in _pattern_starts(joined, words)}, words


def _token_spans(text: str, words: tuple[str, ...]) -> Iterator[tuple[int, int]]:
    """(start, end) of every known token format in ``text``: a str.find for each format's
    literal start, then one anchored match there."""
    low = text.lower()
    if len(low) != len(text):  # lower-casing moved positions (e.g. 'İ'): scan the original
        yield from (m.span() for m in _TOKEN.finditer(text))
        return
    for word in words:
        token = _TOKEN_EXACT[word]
        i = low.find(word)
        while i != -1:
            if token_may_start(text, i):
                m = token.match(text, i)
                if m:
                    yield m.span()
            i = low.find(word, i + 1)


def _replace_tokens(text: str, words: tuple[str, ...]) -> str:
    """``text`` with every token of :data:`TOKEN_FORMATS` replaced (overlapping ones merged);
    ``words``: the :func:`token_words` it may contain."""
    spans = sorted(_token_spans(text, words)) if words else ()
    if not spans:
        return text
    parts: list[str] = []
    pos = 0
    for start, end in spans:
        if start < pos:  # inside or overlapping the previous token
            if end > pos:
                pos = end
            continue
        parts += (text[pos:start], REDACTED)
        pos = end
    parts.append(text[pos:])
    return "".join(parts)


def token_may_start(text: str, i: int) -> bool:
    """Whether a token may start at ``text[i]``: it does not continue an ASCII word (tokens are
    ASCII: a non-ASCII letter before one is no part of it), or the word before is an escape
    sequence such as ``\\n`` or ``\\u00e9`` of JSON or Python text."""
    if i == 0:
        return True
    prev = text[i - 1]
    if not (prev.isascii() and (prev.isalnum() or prev == "_")):
        return True
    return _ESCAPE_BEFORE.search(text, max(0, i - 10), i) is not None


def _key_start(low: str, i: int) -> int:
    """Where the key holding the credential word at ``low[i]`` starts (``aws_`` of ``aws_secret...``)."""
    if i and (low[i - 1].isalnum() or low[i - 1] in "_.-"):
        head = _KEY_HEAD.search(low, max(0, i - 80), i)
        return head.start() if head else i
    return i


def _assignments_at(text: str) -> Iterator[re.Match[str]]:
    """The ``name = `` / ``name: `` heads around each credential word of ``text``, in order: a
    str.find per word, then one anchored match (a scan of every word of a long text costs more)."""
    low = text.lower()
    if len(low) != len(text):  # lower-casing moved positions: scan the whole text
        yield from _ASSIGNMENT.finditer(text)
        return
    starts = set()
    for word in _PAIR_WORDS:
        i = low.find(word)
        while i != -1:
            starts.add(_key_start(low, i))
            i = low.find(word, i + 1)
    for start in sorted(starts):
        while start < len(text) and not (text[start].isalpha() or text[start] == "_"):
            start += 1  # a key starts with a letter or _ (what _KEY_HEAD took may start with a digit)
        m = _ASSIGNMENT.match(text, start)
        if m:
            yield m


def _plain_key(text: str, start: int, key: str) -> str:
    """``key`` as written, without the escape sequence it starts with when read from escaped
    text (``\\nAWS_SECRET_ACCESS_KEY`` is read as ``nAWS_SECRET_ACCESS_KEY``)."""
    if start > 0 and text[start - 1] == "\\":
        m = _KEY_ESCAPE.match(key)
        if m:
            return key[m.end() :]
    return key


def _variable_like(key: str) -> bool:
    """A ``name: value`` key written as a variable or header name, not a word of prose."""
    return key.isupper() or _SEPARATED.search(key) is not None or key.lower() in _BARE_NAMES


def without_credentials(text: str) -> str:
    """``text`` (a URL, a description) with any credential in it replaced: what collect records
    of the store it read from."""
    return Redactor().scrub_text(text)


@functools.lru_cache(maxsize=4096)
def _name_may_hold_secret(name: str) -> bool:
    """The cheap test for a span name (a few distinct names repeat over every span of a collection)."""
    return _needs_scrub(name.lower())


@functools.lru_cache(maxsize=4096)
def is_secret_key(key: str) -> bool:
    """Whether an attribute key names a credential (``llm.api_key`` yes, ``prompt_token_ids`` no)."""
    last = key.rsplit(".", 1)[-1].strip().lower().replace("-", "_")
    if _ALWAYS_SECRET.search(last):
        return True
    return bool(_SECRET_KEY.search(last)) and not _NOT_SECRET.search(last)


@dataclass
class Redactor:
    """Redacts values in place and counts how many it changed."""

    count: int = 0

    def scrub_text(self, text: str, words: tuple[str, ...] | None = None) -> str:
        """``text`` with embedded credentials replaced (rules 2 and 3)."""
        low = text.lower()
        if words is None:
            words = token_words(low)
        if not _needs_scrub(low, words):
            return text
        # Each substitution runs only where its cheap literal test passes: a regex scan of
        # long message text costs far more than str.find.
        out = _QUOTED_PAIR.sub(self._quoted, text)
        if "\\" in out:
            out = _ESCAPED_PAIR.sub(self._escaped, out)
        if "bearer" in low or "basic" in low:
            out = _BEARER.sub(self._bearer, out)
        if "=" in out or ":" in out:
            out = self._assignments(out)
        if "://" in low:
            out = _USERINFO.sub(self._userinfo, out)
        out = _replace_tokens(out, words)
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
            if "logprob" in value:  # an OpenAI logprobs entry: its "token" is model output text
                return {k: self.value(None if k == "token" else str(k), v) for k, v in value.items()}
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
        scrub, words = _strings_to_scrub(keys, lows) if keys else ((), ())
        if not walk and not scrub:
            return attrs  # nothing in it to redact
        out: dict[str, Any] = {}
        for key, value in attrs.items():
            if is_secret_key(key):
                out[key] = self.value(key, value)
            elif isinstance(value, str):
                out[key] = self.scrub_text(value, words) if key in scrub else value
            elif value is None or isinstance(value, int | float):
                out[key] = value  # what value() returns for them, without the call
            else:
                out[key] = self.value(key, value)
        return out

    def span(self, span: dict[str, Any]) -> dict[str, Any]:
        """A Span dict with its name, status text, attributes, event and link attributes and
        resource redacted."""
        name = span.get("name")
        if isinstance(name, str) and _name_may_hold_secret(name):
            span["name"] = self.scrub_text(name)
        status = span.get("status")
        if isinstance(status, dict) and isinstance(status.get("description"), str) and status["description"]:
            status["description"] = self.scrub_text(status["description"])
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

    def _escaped(self, m: re.Match[str]) -> str:
        if is_secret_key(m["key"]):
            return self._quoted(m)
        # An ordinary key whose value is JSON encoded once more: its own pairs are inside.
        inner = _ESCAPED_PAIR.sub(self._escaped, m["val"]) if "\\" in m["val"] else m["val"]
        return f"{m['q']}{m['key']}{m['q']}{m['sep']}{m['vq']}{inner}{m['vq']}"

    def _assignments(self, text: str) -> str:
        """``text`` with the value of every assignment of a credential-named variable replaced."""
        parts: list[str] = []
        pos = 0
        for m in _assignments_at(text):
            if m.start() < pos:  # inside a value replaced already
                continue
            key = _plain_key(text, m.start("key"), m["key"])
            if not is_secret_key(key) or (":" in m["sep"] and not _variable_like(key)):
                continue
            v = _VALUE.match(text, m.end())
            if v is None:
                continue
            value = v["bare"] if v["bare"] is not None else v["quoted"]
            if value in (REDACTED, "") or value.lower() in ("bearer", "basic"):
                continue
            quote = v["open"] or ""
            parts += (text[pos : m.end()], f"{quote}{REDACTED}{quote}")
            pos = v.end()
        return "".join(parts) + text[pos:] if parts else text

    def _bearer(self, m: re.Match[str]) -> str:
        if m["val"] == REDACTED:
            return m.group(0)
        return f"{m['scheme']} {REDACTED}"

    def _userinfo(self, m: re.Match[str]) -> str:
        if m["val"] == REDACTED:
            return m.group(0)
        return f"{m['head']}{REDACTED}@"
