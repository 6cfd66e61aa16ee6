"""Bulk token parsing agrees with upstream's literal_eval reading, and names what is wrong."""

import pyarrow as pa
import pytest
from tracebank.collect.tokens import classify_python, parse_token_lists

CASES = [
    ("[1, 2, 3]", [1, 2, 3], "ok"),
    ("[ 1 ,2 ]", [1, 2], "ok"),
    ("  [0]", [0], "ok"),
    ("[1, 2,]", [1, 2], "ok"),  # Python accepts a trailing comma
    ("[2147483647]", [2147483647], "ok"),
    ("[]", None, "empty_tokens"),
    ("[ ]", None, "empty_tokens"),
    (None, None, "missing_tokens"),
    ("[1.5, 2]", None, "non_integer_token"),
    ("[1.0]", None, "non_integer_token"),
    ("[1e3]", None, "non_integer_token"),
    ("[True, 1]", None, "non_integer_token"),
    ("[1, 'a']", None, "non_integer_token"),
    ('[1, "a"]', None, "non_integer_token"),
    ("[[1, 2]]", None, "non_integer_token"),
    ("[None]", None, "non_integer_token"),
    ("[-1, 2]", None, "negative_token_id"),
    ("[2147483648]", None, "token_id_out_of_range"),
    ("[99999999999999999999999]", None, "token_id_out_of_range"),
    ("garbage", None, "unparseable_tokens"),
    ("[1 2]", None, "unparseable_tokens"),
    ("[1,,2]", None, "unparseable_tokens"),
    ("[01]", None, "unparseable_tokens"),
    ("[null]", None, "unparseable_tokens"),
    ("5", None, "unparseable_tokens"),
    ("[1, 2] trailing", None, "unparseable_tokens"),
]


@pytest.mark.parametrize(("text", "ids", "verdict"), CASES)
def test_each_case_alone(text, ids, verdict):
    got_ids, got_verdict = parse_token_lists(pa.array([text], pa.string()))
    assert (got_ids.to_pylist()[0], got_verdict.to_pylist()[0]) == (ids, verdict)
    assert classify_python(text) == (ids, verdict)


def test_a_column_mixes_fast_and_slow_rows_in_order():
    texts = [c[0] for c in CASES] * 3
    ids, verdict = parse_token_lists(pa.array(texts, pa.string()))
    assert ids.type == pa.list_(pa.int32())
    assert list(zip(ids.to_pylist(), verdict.to_pylist(), strict=True)) == [(c[1], c[2]) for c in CASES] * 3


def test_empty_column():
    ids, verdict = parse_token_lists(pa.array([], pa.string()))
    assert len(ids) == len(verdict) == 0
