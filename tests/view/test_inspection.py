"""`tracebank.view.inspect`: a dataset row decoded with its masked and trained tokens marked, and
the histograms (moved here from train: viewing a row is the view stage's job)."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner
from tracebank.core.errors import TracebankError
from tracebank.transform import TransformConfig, transform
from tracebank.view import InspectConfig, inspect
from tracebank.view.errors import NothingToShowError, ViewError, ViewUsageError
from tracebank.view.inspection import histogram
from tracebank.view.tokens import render_runs
from tracebank.warehouse.location import Warehouse

from tests.fixtures.datasets import QA_PAIRS, SYSTEM, qa_rows, write_dataset
from tests.fixtures.preference import commit_03, plan
from tracebank.cli.main import cli


@pytest.fixture(scope="module")
def qa_wh(tmp_path_factory, view_wh):
    """`qa@v1` committed with fixed row order: the QA pairs twice for training, once for validation."""
    wh = Warehouse(tmp_path_factory.mktemp("inspect") / "warehouse").init()
    tok = view_wh.tokenizer
    write_dataset(wh, "qa", qa_rows(tok, QA_PAIRS, repeat=2), validation=qa_rows(tok, QA_PAIRS))
    return wh


def _expected_head(tokenizer) -> str:
    row = qa_rows(tokenizer, QA_PAIRS, repeat=2)[2]
    trained = sum(1 for x in row["labels"] if x != -100)
    question, answer = QA_PAIRS[2]
    return "\n".join(
        [
            f"qa@v1 train row 2 of 16: {len(row['input_ids'])} tokens, "
            f"{len(row['input_ids']) - trained} masked, {trained} trained, reward {row['reward']}",
            "legend: [-masked (no loss)-] {+trained+}",
            "",
            f"[-<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n"
            f"<|im_start|>assistant\n-]{{+{answer}<|im_end|>\n+}}",
            "",
        ]
    )


def test_a_row_is_marked_masked_and_trained_then_histograms(qa_wh, view_wh):
    text = inspect(qa_wh, InspectConfig("qa@v1", view_wh.model, row=2))
    head = _expected_head(view_wh.tokenizer) + "\n"
    assert text.startswith(head)
    tail = text[len(head) :].splitlines()
    assert tail[0] == "row lengths in tokens (24 rows, all splits; min 52, max 55):"
    bars = [line for line in tail if "|" in line]
    assert sum(int(line.rsplit(" ", 1)[1]) for line in bars[:3]) == 24  # lengths 52, 53, 55
    assert tail[4] == "rewards (24 rows):"
    assert "\x1b[" not in text


def test_colour_on_request(qa_wh, view_wh):
    coloured = inspect(qa_wh, InspectConfig("qa", view_wh.model, color=True))
    assert "\x1b[2m<|im_start|>system" in coloured and "\x1b[1;32m" in coloured and "█" in coloured


def test_bad_rows_splits_and_tokenizers_are_one_line_view_errors(qa_wh, view_wh, tmp_path):
    with pytest.raises(NothingToShowError) as row:
        inspect(qa_wh, InspectConfig("qa", view_wh.model, row=99))
    assert row.value.one_line() == "row 99 is out of range (qa@v1 train has 16 rows)"
    with pytest.raises(NothingToShowError) as split:
        inspect(qa_wh, InspectConfig("qa", view_wh.model, split="test"))
    assert split.value.one_line() == "dataset qa@v1 has no 'test' split (its splits: train, validation)"
    with pytest.raises(ViewError) as missing:
        inspect(qa_wh, InspectConfig("qa", tmp_path / "nope"))
    assert missing.value.one_line().startswith(f"no tokenizer folder at {tmp_path / 'nope'} (")
    tiny = Warehouse(tmp_path / "big-ids").init()
    write_dataset(tiny, "big", [{**qa_rows(view_wh.tokenizer)[0], "input_ids": [10_000] * 52}])
    with pytest.raises(ViewError, match="holds token id 10000, beyond this tokenizer's"):
        inspect(tiny, InspectConfig("big", view_wh.model))


def test_a_preference_version_is_refused_with_where_to_look(view_wh, tmp_path):
    """Its rows are chosen/rejected pairs: reading input_ids from them used to fail mid-way."""
    wh = Warehouse(tmp_path / "prefs").init()
    commit_03(wh, plan(seed=3))
    transform(wh, TransformConfig(name="prefs", kind="preference"))
    with pytest.raises(ViewUsageError) as refused:
        inspect(wh, InspectConfig("prefs", view_wh.model))
    assert isinstance(refused.value, TracebankError)
    assert refused.value.one_line() == (
        "prefs@v1 is a preference version: its rows are pairs, not trained tokens "
        "(show a pair with `tracebank show --dataset prefs@v1 --row N`)"
    )


def test_the_inspect_command_prints_it(qa_wh, view_wh):
    """The CLI is parse + one call + print (fails until `tracebank inspect` calls view.inspect)."""
    args = ["-w", str(qa_wh.root), "inspect", "qa@v1", "--tokenizer", str(view_wh.model), "--row", "2"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert result.stdout == inspect(qa_wh, InspectConfig("qa@v1", view_wh.model, row=2)) + "\n"
    bad = CliRunner().invoke(cli, [*args[:-1], "99"])
    assert bad.exit_code == 1
    assert bad.stderr == "Error: row 99 is out of range (qa@v1 train has 16 rows)\n"


def test_integer_bins_do_not_overlap_and_count_every_value():
    values = [63] * 15 + [75, 122, 130, 134, 140, 146, 150, 157]
    lines = histogram(values, bins=8, integer=True)
    ranges = [tuple(map(int, re.match(r"\s*(\d+)-(\d+) \|", line).groups())) for line in lines]
    assert ranges[0][0] == 63 and ranges[-1][1] == 157
    for (_, end), (start, _) in zip(ranges, ranges[1:], strict=False):
        assert start == end + 1
    counts = [int(line.rsplit(" ", 1)[1]) for line in lines]
    assert sum(counts) == len(values)
    for (lo, hi), count in zip(ranges, counts, strict=True):
        assert count == sum(1 for v in values if lo <= v <= hi)


def test_few_distinct_values_get_one_line_each():
    assert histogram([0.5, 0.5, 1.0]) == [
        "  0.5 | ######################################## 2",
        "    1 | #################### 1",
    ]


def test_control_characters_of_trace_text_are_shown_visibly():
    """Decoded rows are text a model or tool wrote: an escape sequence must not reach the terminal."""
    for color in (False, True):
        out = render_runs([(False, "a\x1b]0;title\x07b\x1b[2J"), (True, "c\rd\n")], color=color)
        hostile = {"\x07", "\r"} | ({"\x1b"} if not color else set())
        assert not hostile & set(out) and "␛]0;title␇" in out and "\n" in out
