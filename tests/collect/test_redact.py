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


# Issue 18, point 3: redaction at every position, detect-secrets as the oracle. ------------------

#: Formats detect-secrets' plugins know, in the shapes they look for (made up, none is real).
ORACLE_TOKENS = {
    **{k: v for k, v in TOKENS.items() if k != "private key"},
    "openai project": "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" + "T3BlbkFJ" + "K1l2M3n4O5p6Q7r8S9t0",
    "pypi": "pypi-AgEIcHlwaS5vcmc" + "CJDk3ZjE0YWMtNGY0OC00YjQ4LTliNzMtYmY1ZTkzYjU0OGE1AAIqWzMsImFiY2RlZiJd",
}
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
#: Assignments of credential-named variables: (text with {v}, the secret value).
ASSIGNMENTS = {
    "shell export": ('export AWS_SECRET_ACCESS_KEY="{v}"', AWS_SECRET),
    "yaml": ("aws_secret_access_key: {v}", AWS_SECRET),
    "env token": ("GITHUB_TOKEN={v}", "not-a-known-format-1234"),
    "api key spaced": ('MY_SERVICE_API_KEY = "{v}"', "abcdef123456xyz"),
    "password": ("PASSWORD='{v}'", "correct horse battery staple"),
    "header": ("X-Api-Key: {v}", "Zm9vYmFyYmF6cXV4"),
    "url userinfo": ("http://user:{v}@db.example.com/x", "hunter2hunter2"),
}
PRIVATE_KEY = TOKENS["private key"]
#: Where a secret may sit: each takes the secret and gives the stored text.
CONTEXTS = {
    "line start": lambda s: f"first line\n{s}\nlast line",
    "after a tab": lambda s: f"column\t{s}\tnext",
    "after a non-ASCII letter": lambda s: f"café{s} and Grüße:{s}",
    "JSON encoded twice": lambda s: json.dumps(json.dumps({"content": f"ab\n{s}\tcd é{s}"})),
    "JSON, non-ASCII escaped": lambda s: json.dumps({"content": f"é{s}"}),
    "Python repr": lambda s: repr({"content": f"line\n{s}", "tab": f"\t{s}"}),
}
CORPUS = [
    *(
        (f"{fmt} / {where}", token, place(token))
        for fmt, token in ORACLE_TOKENS.items()
        for where, place in CONTEXTS.items()
    ),
    *(
        (f"{fmt} / {where}", value, place(text.format(v=value)))
        for fmt, (text, value) in ASSIGNMENTS.items()
        for where, place in CONTEXTS.items()
    ),
    *(
        (f"private key / {where}", PRIVATE_KEY.splitlines()[1], place(PRIVATE_KEY))
        for where, place in CONTEXTS.items()
    ),
]


def _oracle_hits(text: str) -> list:
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.core.scan import scan_line
    from detect_secrets.settings import transient_settings

    plugins = [
        {"name": cls.__name__}
        for cls in get_mapping_from_secret_type_to_class().values()
        if "HighEntropy" not in cls.__name__ and cls.__name__ != "IPPublicDetector"
    ]
    with transient_settings({"plugins_used": plugins, "filters_used": []}):
        return [hit.secret_value for line in text.splitlines() for hit in scan_line(line)]


@pytest.mark.parametrize(("case", "secret", "text"), CORPUS, ids=[c for c, _, _ in CORPUS])
def test_no_secret_survives_at_any_position(case, secret, text):
    """Each format and assignment, at a line start, after a tab or a non-ASCII letter, in JSON
    encoded twice and in a repr: gone from the text (scrub_text and mapping, as collect calls it),
    and detect-secrets finds nothing left; the text around it is kept."""
    out = Redactor().scrub_text(text)
    assert secret not in out, out
    assert REDACTED in out
    assert _oracle_hits(out) == [], out
    attrs = Redactor().mapping({"gen_ai.prompt": text, "gen_ai.system": "openai"})
    assert secret not in attrs["gen_ai.prompt"] and attrs["gen_ai.system"] == "openai"
    if case.endswith(("JSON encoded twice", "JSON, non-ASCII escaped")):
        assert json.loads(out)  # still JSON
    if case.endswith("Python repr"):
        assert ast.literal_eval(out)  # still a repr


def test_the_oracle_sees_the_corpus():
    """The corpus is made of secrets detect-secrets knows: it finds most of them in the plain text."""
    plain = [CONTEXTS["line start"](t) for t in ORACLE_TOKENS.values()]
    plain += [text.format(v=value) for text, value in ASSIGNMENTS.values()] + [PRIVATE_KEY]
    found = [bool(_oracle_hits(t)) for t in plain]
    assert sum(found) >= 16, list(zip(plain, found, strict=True))


def test_span_name_status_and_store_url_are_redacted():
    from tracebank.collect.redact import without_credentials

    token = ORACLE_TOKENS["github classic"]
    span = {
        "name": f"tool:{token}",
        "status": {"status_code": "ERROR", "description": f"401 for\n{token}"},
        "attributes": {},
    }
    Redactor().span(span)
    assert span == {
        "name": f"tool:{REDACTED}",
        "status": {"status_code": "ERROR", "description": f"401 for\n{REDACTED}"},
        "attributes": {},
    }
    assert without_credentials("http://admin:pa55word@store:4747") == f"http://admin:{REDACTED}@store:4747"
    assert without_credentials("http://127.0.0.1:4747") == "http://127.0.0.1:4747"


def test_agl1_event_data_is_redacted_at_every_position():
    token = ORACLE_TOKENS["aws access key id"]
    event = {"content": json.dumps({"text": f"é{token}\n{token}"}), "args": [f"\t{token}"]}
    out = json.dumps(Redactor().value(None, event))
    assert token not in out


@pytest.mark.parametrize(
    "text",
    [
        "The key: unlock the door with it",  # prose, not a variable
        "token_count=5 max_tokens: 100 cache_key=abc",
        "see http://example.com:8080/path and a==b",
        "task-abcdefghijklmnopqrst, ask-questions-freely",
        "café AKIAshort",
    ],
)
def test_prose_and_labels_are_kept(text):
    assert Redactor().scrub_text(text) == text


def test_redaction_stays_fast_on_long_text():
    """A long message with credential words but no secret, and one with many secrets: linear time."""
    import time

    words = "the key: value token usage password policy api_key rotation ghp_short sk-x é\n" * 20_000
    start = time.perf_counter()
    assert Redactor().scrub_text(words) == words
    secrets = f"é{ORACLE_TOKENS['openai project']}\nPASSWORD=x{AWS_SECRET} \\n{TOKENS['stripe']}\n" * 5_000
    out = Redactor().scrub_text(secrets)
    assert AWS_SECRET not in out and TOKENS["stripe"] not in out
    assert time.perf_counter() - start < 5.0


def test_the_store_url_is_recorded_without_its_password(fresh_store_url, wh):
    """`collect http://user:PASSWORD@host` keeps the password out of the manifest, the `collections`
    table and the result it prints."""
    from tracebank.collect import CollectConfig, collect
    from tracebank.warehouse.query import run_sql

    from tests.collect.helpers import fill_url

    fill_url(fresh_store_url, 1)
    with_password = fresh_store_url.replace("://", "://admin:Pa55w0rdSecret@")
    result = collect(with_password, wh, CollectConfig())
    assert result.committed and "Pa55w0rdSecret" not in result.summary()
    (row,) = run_sql(wh, "SELECT store_url FROM collections").to_pylist()
    assert row["store_url"] == fresh_store_url.replace("://", f"://admin:{REDACTED}@")
    stored = b"".join(p.read_bytes() for p in wh.root.rglob("*") if p.is_file())
    assert b"Pa55w0rdSecret" not in stored
