"""The fast JSON path gives the values warehouse.bronze.to_json gives, and steps aside where it would not."""

from __future__ import annotations

import json
import math
import random

import pytest
from tracebank.collect import fastjson
from tracebank.collect.writer import spans_arrow
from tracebank.warehouse import bronze

from tests.fixtures.proxy_spans import random_rollout_spans

pytestmark = pytest.mark.skipif(fastjson.orjson is None, reason="orjson is not installed")


def _same_value(a: object, b: object) -> bool:
    """Equal, with NaN equal to NaN (json.loads reads NaN back as a float that equals nothing)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_value(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


@pytest.mark.parametrize(
    "text",
    [
        b'{"a": 1, "b": [1.5, -0.0, 1e-7, 1e+16, true, null, "\\u00e9t\\u00e9 \\ud83d\\ude00"]}',
        b'{"z": {"y": {"x": "deep"}}, "a": "", "m": [], "n": {}}',
        b'{"big": 999999999999999999, "neg": -999999999999999999}',  # 18 digits: orjson reads ints
    ],
)
def test_plain_documents_round_trip_to_the_same_values(text):
    value, plain = fastjson.loads(text)
    assert plain
    fast, exact = fastjson.encoder(True)(value), bronze.to_json(value)
    assert fast is not None and exact is not None
    assert _same_value(json.loads(fast), json.loads(exact))
    assert list(json.loads(fast)) == list(json.loads(exact))  # keys sorted alike


@pytest.mark.parametrize(
    "text",
    [
        b'{"nan": NaN, "inf": Infinity}',  # orjson refuses these; json reads them
        b'{"n": 123456789012345678901234567890}',  # orjson would read a float
        b'{"n": -9223372036854775809}',
        b'{"n": 18446744073709551615}',  # 19+ digits: json, to be sure
        b'{"s": "\\ud800 lone surrogate"}',  # orjson refuses it; json keeps it
    ],
)
def test_what_orjson_reads_differently_goes_through_json(text):
    value, plain = fastjson.loads(text)
    assert not plain
    assert _same_value(value, json.loads(text))
    assert fastjson.encoder(plain)(value) == bronze.to_json(value)  # byte for byte


def test_long_digit_runs_inside_strings_only_cost_the_fast_path():
    value, plain = fastjson.loads(b'{"trace": "1234567890123456789012"}')
    assert not plain and value == {"trace": "1234567890123456789012"}


def test_spans_arrow_plain_and_exact_hold_the_same_spans():
    rng = random.Random(7)
    spans = [s.model_dump() for s in random_rollout_spans("ro-1", "at-1", rng, n_calls=3, reward=0.5)]
    # The fixture's ids are random hex, which now and then holds a run of 19+ digits and so
    # (rightly) takes the exact path; this test is about the plain path, so fix the ids.
    ids = {s[k]: f"id-{i}-{k}" for i, s in enumerate(spans) for k in ("trace_id", "span_id")}
    for s in spans:
        for k in ("trace_id", "span_id", "parent_id"):
            s[k] = ids.get(s[k], s[k])
        for k in ("context", "parent"):
            if s.get(k):
                s[k] = {
                    **s[k],
                    "trace_id": ids.get(s[k]["trace_id"], s[k]["trace_id"]),
                    "span_id": ids.get(s[k]["span_id"], s[k]["span_id"]),
                }
        for key in [
            k for k, v in s["attributes"].items() if k == "gen_ai.response.id" or k == "llm.hosted_vllm.id"
        ]:
            s["attributes"][key] = f"chatcmpl-resp-{s['sequence_id']}"
    spans[1]["attributes"]["unicode"] = "naïve ünïcode ✓"
    plain_spans, plain = fastjson.loads(json.dumps(spans).encode())
    assert plain
    exact = spans_arrow(spans, "c1")
    fast = spans_arrow(plain_spans, "c1", plain=True)
    assert exact.equals(bronze.spans_table(spans, "c1"))  # the exact path is bronze's, byte for byte
    assert [bronze.span_dict_from_row(r) for r in fast.to_pylist()] == [
        bronze.span_dict_from_row(r) for r in exact.to_pylist()
    ]
