"""Bulk token parsing agrees with upstream's literal_eval reading, and names what is wrong."""

import random

import pyarrow as pa
import pytest
from tracebank.collect.tokens import classify_python, extended_rows, parse_prompt_lists, parse_token_lists

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


# (earlier prompt, later prompt of the same rollout, the later one's ids and verdict): texts that
# share a prefix that is not a whole list's worth of elements.
PROMPT_PAIRS = [
    ("[1, 2]", "[1, 2, 3, 4]", [1, 2, 3, 4], "ok"),
    ("[1, 23]", "[1, 2345, 6]", [1, 2345, 6], "ok"),  # "[1, 23" is a prefix, not at an element's end
    ("[1, 2,]", "[1, 2,, 3]", None, "unparseable_tokens"),  # after a trailing comma DuckDB reads
    ("[1, 2 ]", "[1, 2 , 3]", [1, 2, 3], "ok"),
    ("[-1, 2]", "[-1, 2, 3]", None, "negative_token_id"),  # the earlier list is not usable
    ("[1, 2]", "[1, 2, -3]", None, "negative_token_id"),
    ("[1, 2]", "[1, 2,]", [1, 2], "ok"),  # nothing appended but a trailing comma
    ("[1, 2]", "[1, 2, ]", [1, 2], "ok"),
    ("[1, 2]", "[1, 2, 2147483648]", None, "token_id_out_of_range"),
    ("[1, 2]", "[1, 2, 3.5]", None, "non_integer_token"),
    ("[1, 2]", "[1, 2, 3] x", None, "unparseable_tokens"),
    ("[1, 2]", "[1, 2], 3]", None, "unparseable_tokens"),
    ("[1, 2]", "[1, 2,, 3]", None, "unparseable_tokens"),
    ("[1, 2]", "[1, 2, 3]\u00e9", None, "unparseable_tokens"),
    ("[1, 2]", "[1, 2]", [1, 2], "ok"),
    ("[]", "[], 1]", None, "unparseable_tokens"),
    (None, "[1]", [1], "ok"),
    ("[1, 2]", None, None, "missing_tokens"),
]


@pytest.mark.parametrize(("first", "second", "ids", "verdict"), PROMPT_PAIRS)
def test_a_prompt_parsed_past_the_one_before_is_the_prompt_parsed_whole(first, second, ids, verdict):
    # Each pair alone: one odd chain makes a whole batch be parsed whole, hiding a wrong reuse.
    got_ids, got_verdict = parse_prompt_lists(pa.array([first, second], pa.string()), ["r", "r"])
    alone_ids, alone_verdict = parse_token_lists(pa.array([first, second], pa.string()))
    assert got_ids.type == pa.list_(pa.int32())
    assert (got_ids.to_pylist()[1], got_verdict.to_pylist()[1]) == (ids, verdict)
    assert got_ids.to_pylist() == alone_ids.to_pylist()
    assert got_verdict.to_pylist() == alone_verdict.to_pylist()


def test_only_a_whole_list_with_elements_appended_counts_as_extended():
    texts = ["[1, 2]", "[9]", "[1, 2, 3]", "[1, 23, 4]", "[1, 2, 3]", "[1, 2, 3, 4]", None, "[9, 8]"]
    keys = ["a", "b", "a", "c", "a", "a", "b", "b"]
    # row 3 shares "[1, 2" with row 0 but is another rollout; row 4 repeats row 2; 7 follows 1.
    assert extended_rows(pa.array(texts, pa.large_string()), keys).tolist() == [-1, -1, 0, -1, -1, 4, -1, 1]


def test_long_interleaved_chains_parse_as_each_list_alone():
    rng = random.Random(7)
    prompts: dict[str, tuple[list[int], str]] = {}
    texts, keys, expected = [], [], []
    for _ in range(400):
        key = f"r{rng.randrange(12)}"
        ids, text = prompts.get(key, ([], ""))
        new = [rng.randrange(50_000) for _ in range(rng.randint(1, 60))]
        sep = rng.choice([", ", ",", " , "])
        if not ids or rng.random() < 0.1:  # a new conversation in the same rollout
            ids, text = new, "[" + sep.join(map(str, new)) + "]"
        else:
            ids, text = ids + new, text[:-1] + sep + sep.join(map(str, new)) + "]"
        prompts[key] = (ids, text)
        texts.append(text)
        keys.append(key)
        expected.append(ids)
    column = pa.array(texts, pa.string())
    assert (extended_rows(column.cast(pa.large_string()), keys) >= 0).sum() > 150
    got_ids, got_verdict = parse_prompt_lists(column, keys)
    assert got_ids.to_pylist() == expected
    assert set(got_verdict.to_pylist()) == {"ok"}
    assert got_ids.equals(parse_token_lists(column)[0])
