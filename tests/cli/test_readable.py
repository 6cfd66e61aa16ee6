"""Readable query output: capped rows and widths that say what they cut, and a vertical layout."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from tracebank.cli.readable import Limits, table_text, vertical_text

UTC = dt.UTC


def _spans() -> pa.Table:
    return pa.table(
        {
            "name": ["litellm_request", "raw_gen_ai_request", "agentlightning.annotation"],
            "attributes": ['{"gen_ai.input.messages": "' + "x" * 60 + '"}', "line one\nline two", None],
            "start_time": [dt.datetime(2026, 11, 30, 12, 0, 0, 500000, tzinfo=UTC)] * 3,
            "n": [1, 2.5, None],
        }
    )


def test_the_table_caps_rows_and_widths_and_says_so():
    assert table_text(_spans(), Limits(max_rows=2, max_width=12)) == "\n".join(
        [
            "name          attributes    start_time                        n",
            "------------  ------------  --------------------------------  ---",
            'litellm_req…  {"gen_ai.in…  2026-11-30T12:00:00.500000+00:00  1',
            "raw_gen_ai_…  line one↵li…  2026-11-30T12:00:00.500000+00:00  2.5",
            "(3 rows; showing the first 2 (--max-rows 0 shows all); 4 values cut to 12 characters "
            "(--max-width 0, --format vertical or --format json shows them whole))",
        ]
    )


def test_nothing_cut_nothing_said():
    table = pa.table({"a": [1], "b": ["short"]})
    assert table_text(table) == "a  b\n-  -----\n1  short\n(1 row)"


def test_vertical_keeps_newlines_and_long_values():
    text = vertical_text(_spans(), Limits(max_rows=0, max_width=40))
    assert text.splitlines()[5:10] == [
        "-[ row 2 ]-----------------",
        "name       | raw_gen_ai_request",
        "attributes | line one",
        "           | line two",
        "start_time | 2026-11-30T12:00:00.500000+00:00",
    ]
    assert '"gen_ai.input.messages": "' + "x" * 60 in text
    assert text.endswith("(3 rows)")
