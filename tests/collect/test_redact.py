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


# Issue 12, point 7: the redaction gaps an attack found, each kept before. ----------------

# Made-up credentials in each format's documented shape (none of them is real).
TOKENS = {
    "github classic": "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
    "github oauth": "gho_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2",
    "github fine-grained": "github_pat_11ABCDEFG0123456789_"
    + "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTU",
    "aws access key id": "AKIA" + "IOSFODNN7EXAMPLE",
    "aws temporary key id": "ASIA" + "Y34FZKBOKMUTVV7A",
    "slack bot": "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "slack user": "xoxp-" + "123456789012-123456789012-123456789012-0123456789abcdef0123456789abcdef",
    "slack webhook": "hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
    "google api key": "AIza" + "SyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
    "hugging face": "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567",
    "gitlab": "glpat-" + "xxxxxxxxxxxxxxxxxxxx1234",
    "stripe": "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "sendgrid": "SG." + "ngeVfQFYQlKU0ufo8x5d1A" + "." + "TwL2iGABf9DHoTf-09kqeF8tAmbihYzrnopKc-1s5cr",
    "npm": "npm_" + "abcdefghijklmnopqrstuvwxyz0123456789",
    "openai": "sk-proj-" + "abcdefghijklmnopqrstuvwxyz012345",
    "jwt": "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
    "eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ."
    "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
    "private key": "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MZWbU3\n"
    "zqGbKJTRmF0gWrXnG2+yW1e7b4W+Xq==\n-----END RSA PRIVATE KEY-----",
}


def test_password_in_url_userinfo_is_redacted():
    r = Redactor()
    out = r.scrub_text("cloning http://user:s3cr3tT0ken@git.example.com/repo.git now")
    assert out == f"cloning http://user:{REDACTED}@git.example.com/repo.git now"
    assert r.scrub_text("postgres://app:pa55word@db:5432/x") == f"postgres://app:{REDACTED}@db:5432/x"
    # No password, no credential: left alone, and so are plain URLs and e-mail addresses.
    for text in ("ssh://git@github.com/a/b", "https://example.com/a?b=c", "mail me@example.com"):
        assert r.scrub_text(text) == text
    assert Redactor().mapping({"url": "http://user:TOKEN1234@host/x"}) == {
        "url": f"http://user:{REDACTED}@host/x"
    }


def test_json_encoded_twice_is_redacted():
    inner = json.dumps({"headers": {"x-api-key": "abc123secret", "x-trace": "t-1"}})
    twice = json.dumps({"metadata": inner})
    thrice = json.dumps({"outer": twice})
    r = Redactor()
    out = json.loads(json.loads(r.scrub_text(twice))["metadata"])
    assert out == {"headers": {"x-api-key": REDACTED, "x-trace": "t-1"}}
    out3 = json.loads(json.loads(json.loads(r.scrub_text(thrice))["outer"])["metadata"])
    assert out3 == {"headers": {"x-api-key": REDACTED, "x-trace": "t-1"}}
    # The same through mapping(), as collect calls it.
    red = Redactor().mapping({"metadata.requester_metadata": twice})
    assert "abc123secret" not in red["metadata.requester_metadata"]


def test_json_encoded_twice_keeps_a_value_with_escaped_quotes_whole():
    inner = json.dumps({"password": 'he said "hi" and left', "user": "u"})
    out = json.loads(json.loads(Redactor().scrub_text(json.dumps({"m": inner})))["m"])
    assert out == {"password": REDACTED, "user": "u"}


@pytest.mark.parametrize("kind", sorted(TOKENS))
def test_token_formats_in_free_text_are_redacted(kind):
    token = TOKENS[kind]
    r = Redactor()
    text = f"The agent wrote: use {token} to log in.\nThen it stopped."
    out = r.scrub_text(text)
    assert out == f"The agent wrote: use {REDACTED} to log in.\nThen it stopped."
    assert r.count == 1
    # Inside a chat message recorded as JSON (newlines escaped) and under an ordinary key.
    message = json.dumps([{"role": "user", "content": f"my key is {token}"}])
    red = Redactor().mapping({"gen_ai.input.messages": message})
    assert json.loads(red["gen_ai.input.messages"]) == [{"role": "user", "content": f"my key is {REDACTED}"}]


@pytest.mark.parametrize(
    "key", ["tls.key", "client.key", "aws_access_key_id", "AWS_ACCESS_KEY_ID", "secret_key", "AccountKey"]
)
def test_key_and_access_key_id_attributes_are_redacted(key):
    assert is_secret_key(key)
    assert Redactor().mapping({key: "AKIAplainvalue"}) == {key: REDACTED}
    assert Redactor().scrub_text(f"{key}=abcdef&x=1") == f"{key}={REDACTED}&x=1"


@pytest.mark.parametrize("key", ["cache_key", "gen_ai.request.sort_key", "partition_key", "monkey", "keys"])
def test_keys_of_lookups_are_not_credentials(key):
    assert not is_secret_key(key)


@pytest.mark.parametrize(
    "text",
    [
        "task-abcdefghijklmnop and ask-questions-freely",  # 'sk-' inside a word
        "Asia is a continent; asian food; a github_path_x",
        "the right thing, though",
        "ghp_short",
        "xoxb",
        "eyJub3Q.a.jwt",
    ],
)
def test_words_that_look_like_token_prefixes_are_kept(text):
    assert Redactor().scrub_text(text) == text


def test_detect_secrets_finds_nothing_in_redacted_text():
    """The token formats checked against a well-kept detector: every secret detect-secrets' token
    plugins find in the raw text is gone from the redacted text."""
    from detect_secrets.core.scan import scan_line
    from detect_secrets.settings import transient_settings

    plugins = [
        {"name": name}
        for name in (
            "AWSKeyDetector",
            "GitHubTokenDetector",
            "SlackDetector",
            "PrivateKeyDetector",
            "JwtTokenDetector",
            "StripeDetector",
            "SendGridDetector",
            "BasicAuthDetector",
            "NpmDetector",
            "GitLabTokenDetector",
        )
    ]
    lines = [f"value = {token}" for token in TOKENS.values() for token in token.splitlines()[:1]]
    lines.append("url = http://admin:hunter2hunter2@internal.example.com/x")
    with transient_settings({"plugins_used": plugins, "filters_used": []}):
        found = [(line, list(scan_line(line))) for line in lines]
        assert sum(bool(hits) for _, hits in found) >= 12, found  # the oracle sees them
        for line, _ in found:
            redacted = Redactor().scrub_text(line)
            assert list(scan_line(redacted)) == [], (line, redacted)


def test_logprob_tokens_are_model_text_not_credentials():
    entry = {"token": " 33", "logprob": -5.9, "bytes": [32, 51, 51], "top_logprobs": []}
    nested = {"logprobs": {"content": [entry]}, "auth": {"token": "abc"}}
    redacted = Redactor().value(None, nested)
    assert redacted["logprobs"]["content"] == [entry]
    assert redacted["auth"] == {"token": REDACTED}
