"""Which attribute values count as credentials, and what is left of them."""

from __future__ import annotations

import ast
import json
import random

import pytest
from tracebank.collect.redact import REDACTED, Redactor, is_secret_key

from tests.fixtures.proxy_spans import SECRET_KEY


@pytest.mark.parametrize(
    "key",
    [
        "llm.api_key",
        "api_key",
        "x-api-key",
        "apikey",
        "http.request.header.authorization",
        "Authorization",
        "proxy-authorization",
        "db.password",
        "client_secret",
        "aws_secret_access_key",
        "access_token",
        "refresh_token",
        "token",
        "hf_token",
        "cookie",
        "set-cookie",
        "private_key",
        "metadata.user_api_key_metadata",
    ],
)
def test_credential_keys(key):
    assert is_secret_key(key)


@pytest.mark.parametrize(
    "key",
    [
        "llm.hosted_vllm.prompt_token_ids",
        "llm.hosted_vllm.response_token_ids",
        "prompt_token_ids",
        "response_token_ids",
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens",
        "max_tokens",
        "llm.usage.total_tokens",
        "metadata.user_api_key_hash",
        "metadata.user_api_key_alias",
        "metadata.user_api_key_team_id",
        "gen_ai.response.id",
        "llm.hosted_vllm.choices",
        "http.route",
    ],
)
def test_keys_that_only_mention_tokens_or_keys(key):
    assert not is_secret_key(key)


def test_header_dict_repr_keeps_everything_but_the_secret():
    r = Redactor()
    text = repr(
        {
            "headers": {
                "authorization": f"Bearer {SECRET_KEY}",
                "x-rollout-id": "ro-1",
                "X-Api-Key": "abc123secret",
            }
        }
    )
    out = r.scrub_text(text)
    assert ast.literal_eval(out) == {
        "headers": {"authorization": REDACTED, "x-rollout-id": "ro-1", "X-Api-Key": REDACTED}
    }
    assert r.count == 1


def test_json_dict_and_bare_patterns():
    r = Redactor()
    text = json.dumps({"password": "hunter2", "user": "me", "note": f"use {SECRET_KEY} here"})
    assert json.loads(r.scrub_text(text)) == {
        "password": REDACTED,
        "user": "me",
        "note": f"use {REDACTED} here",
    }
    assert (
        r.scrub_text("curl -H 'Authorization: Bearer abcdefgh12345'")
        == "curl -H 'Authorization: Bearer [REDACTED]'"
    )
    assert r.scrub_text("GET /x?api_key=abc123&page=2") == "GET /x?api_key=[REDACTED]&page=2"


def test_token_ids_and_ordinary_text_are_untouched():
    r = Redactor()
    attrs = {
        "llm.hosted_vllm.prompt_token_ids": "[1, 2, 3]",
        "llm.hosted_vllm.choices": repr(
            [{"index": 0, "message": {"role": "assistant", "content": "42"}, "token_ids": [5, 6]}]
        ),
        "gen_ai.usage.input_tokens": 3,
        "gen_ai.input.messages": json.dumps(
            [{"role": "user", "parts": [{"type": "text", "content": "what is a token?"}]}]
        ),
    }
    assert r.mapping(dict(attrs)) == attrs
    assert r.count == 0


def test_span_attributes_events_and_resource_are_redacted_and_counted():
    r = Redactor()
    span = {
        "attributes": {"llm.api_key": SECRET_KEY, "n": 1, "ids": [1, 2]},
        "events": [{"name": "e", "attributes": {"authorization": "Bearer xyz12345678"}}],
        "links": [],
        "resource": {"attributes": {"service.name": "proxy", "token": "t0k3n"}, "schema_url": ""},
    }
    r.span(span)
    assert span["attributes"] == {"llm.api_key": REDACTED, "n": 1, "ids": [1, 2]}
    assert span["events"][0]["attributes"] == {"authorization": REDACTED}
    assert span["resource"]["attributes"] == {"service.name": "proxy", "token": REDACTED}
    assert r.count == 3


def test_secret_word_inside_a_longer_key_of_an_embedded_dict():
    out = Redactor().scrub_text("{'secret_value': 'abc', 'n': 'x'}")
    assert out == "{'secret_value': '[REDACTED]', 'n': 'x'}"


def _reference(r: Redactor, attrs: dict) -> dict:
    """Redactor.value on every value: the rules without any of mapping()'s shortcuts."""
    return {k: r.value(k, v) for k, v in attrs.items()}


def test_mapping_shortcuts_change_nothing_the_rules_would_not():
    # Values chosen to put patterns at string ends, across two joined strings, in non-ASCII
    # text whose lower-casing changes its length, and under secret and ordinary keys.
    rng = random.Random(3)
    values = [
        "Bearer abcdefgh123",
        "ends with bearer",
        "basic",
        " abcdefghijk",
        "x sk-abcdefghijk y",
        "'api_key': 'zz'",
        "token=abc",
        "auth",
        "orization: Bearer qwertyuiop",
        "İİİ bearer",
        "xİ'token': 'v'",
        "ΣΑΣ sk-abcdefghijkl",
        "'secret'",
        ": 'x'",
        "ok\nBearer abcdefghijkl",
        "plain",
        "",
        REDACTED,
        3,
        0,
        None,
        1.5,
        True,
        [1, "Bearer qqqqqqqqqq"],
        {"password": "p"},
    ]
    keys = ["api_key", "token", "note", "prompt_token_ids", "authorization", "x", "msg", "n"]
    for _ in range(3000):
        attrs = {
            f"{rng.choice(keys)}{i}" if rng.random() < 0.5 else rng.choice(keys): rng.choice(values)
            for i in range(rng.randint(1, 6))
        }
        fast, slow = Redactor(), Redactor()
        assert fast.mapping(dict(attrs)) == _reference(slow, attrs), attrs
        assert fast.count == slow.count, attrs
