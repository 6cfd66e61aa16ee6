import re

from tracebank.train.inspection import histogram


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


def test_inspect_shows_control_characters_of_trace_text_visibly():
    """Decoded rows are text a model or tool wrote: an escape sequence must not reach the terminal."""
    from tracebank.train.inspection import render_row

    for color in (False, True):
        out = render_row([(False, "a\x1b]0;title\x07b\x1b[2J"), (True, "c\rd\n")], color=color)
        hostile = {"\x07", "\r"} | ({"\x1b"} if not color else set())
        assert not hostile & set(out) and "␛]0;title␇" in out and "\n" in out
