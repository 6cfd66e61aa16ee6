"""A judge behind any OpenAI-compatible endpoint (``--judge-url``): ``POST {url}/chat/completions``.

The URL is the user's flag only (never read from a record); the key is read from the environment
variable ``TRACEBANK_JUDGE_KEY`` and sent as a bearer token, never written anywhere. Redirects are
refused (a redirect would carry the key to another host), a response is read up to 1 MiB, and each
request has a bounded timeout: an endpoint that is down or slow fails that rollout, not the layer.
"""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from tracebank.rescore.errors import RescoreUsageError
from tracebank.rescore.geval import JudgeFailed, Judgment, parse_score, scale_probs, weighted_mean

KEY_ENV = "TRACEBANK_JUDGE_KEY"
MAX_BODY = 1 << 20
#: Alternatives asked for the score's token (20 is what OpenAI and vLLM allow by default).
TOP_LOGPROBS = 20
#: Tokens the judge may write: the score, and a little room for a model that writes "Score: 4".
MAX_TOKENS = 8


def checked_url(url: str) -> str:
    """``url``, if it is http(s) with a host and no credentials in it."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RescoreUsageError(
            f"--judge-url must be an http(s) URL, got {url!r}", "for example http://127.0.0.1:8000/v1"
        )
    if parts.username or parts.password:
        raise RescoreUsageError("--judge-url holds credentials", f"put the key in ${KEY_ENV} instead")
    return url


def recorded_url(url: str) -> str:
    """The URL as the manifest records it: no query or fragment (they may hold a key)."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def chat_url(url: str) -> str:
    """``{url}/chat/completions``, the query (an ``api-version``...) kept after the path."""
    parts = urllib.parse.urlsplit(url)
    path = parts.path.rstrip("/") + "/chat/completions"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # urllib then raises the 3xx as an HTTPError


class HttpJudge:
    """Requests to one endpoint for one model; thread-safe (each call its own connection)."""

    def __init__(
        self,
        url: str,
        model: str,
        scale: list[int],
        samples: int,
        temperature: float,
        seed: int,
        timeout: float,
    ) -> None:
        self.url, self.model, self.scale = chat_url(checked_url(url)), model, scale
        self.samples, self.temperature, self.seed, self.timeout = samples, temperature, seed, timeout
        self.key = os.environ.get(KEY_ENV)
        self.opener = urllib.request.build_opener(_NoRedirect)

    def __call__(self, prompt: str, key: str) -> Judgment:
        first = self._choice(prompt, temperature=0.0, seed=self.seed)
        score = self._score(first)
        if not self.samples:
            return Judgment(score)
        samples = []
        for k in range(self.samples):
            choice = self._choice(prompt, temperature=self.temperature, seed=self.seed + k)
            samples.append(parse_score(_content(choice), self.scale))
        return Judgment(score, samples)

    def _score(self, choice: dict[str, Any]) -> float:
        top = _first_token_top(choice)
        probs = scale_probs(top, self.scale) if top else {}
        # an endpoint without log-probabilities (or none of the scale among them): the number it wrote
        return weighted_mean(probs) if probs else parse_score(_content(choice), self.scale)

    def _choice(self, prompt: str, temperature: float, seed: int) -> dict[str, Any]:
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": MAX_TOKENS,
            "temperature": temperature,
            "seed": seed,
            "logprobs": True,
            "top_logprobs": TOP_LOGPROBS,
        }
        answer = self._post(json.dumps(body).encode())
        choices = answer.get("choices") if isinstance(answer, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise JudgeFailed("the judge endpoint's answer has no choices")
        return choices[0]

    def _post(self, data: bytes) -> Any:
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
        deadline = time.monotonic() + self.timeout
        try:
            with self.opener.open(request, timeout=self.timeout) as response:
                raw = _read_bounded(response, deadline)
        except urllib.error.HTTPError as exc:
            raise JudgeFailed(f"the judge endpoint answered HTTP {exc.code}") from None
        except TimeoutError:
            raise JudgeFailed(f"the judge endpoint gave no answer within {self.timeout:g}s") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, TimeoutError | socket.timeout):
                raise JudgeFailed(f"the judge endpoint gave no answer within {self.timeout:g}s") from None
            raise JudgeFailed(f"cannot reach the judge endpoint ({type(reason).__name__})") from None
        try:
            return json.loads(raw)
        except ValueError:
            raise JudgeFailed("the judge endpoint's answer is not JSON") from None


def _read_bounded(response: Any, deadline: float) -> bytes:
    chunks, size = [], 0
    while chunk := response.read(65536):
        size += len(chunk)
        if size > MAX_BODY:
            raise JudgeFailed(f"the judge endpoint's answer is over {MAX_BODY >> 20} MiB")
        if time.monotonic() > deadline:  # a server that trickles bytes still ends at the deadline
            raise TimeoutError
        chunks.append(chunk)
    return b"".join(chunks)


def _content(choice: dict[str, Any]) -> str:
    message = choice.get("message")
    content = message.get("content") if isinstance(message, dict) else choice.get("text")
    if not isinstance(content, str):
        raise JudgeFailed("the judge endpoint's answer has no text")
    return content


def _first_token_top(choice: dict[str, Any]) -> list[tuple[str, float]]:
    """(token, logprob) alternatives of the answer's first token; empty where there are none."""
    logprobs = choice.get("logprobs")
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list) or not content or not isinstance(content[0], dict):
        return []
    top = content[0].get("top_logprobs")
    if not isinstance(top, list):
        return []
    return [
        (t["token"], float(t["logprob"]))
        for t in top
        if isinstance(t, dict)
        and isinstance(t.get("token"), str)
        and isinstance(t.get("logprob"), int | float)
        and not isinstance(t.get("logprob"), bool)
    ]
