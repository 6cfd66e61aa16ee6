"""CollectConfig checks and --since parsing."""

from __future__ import annotations

import pytest
from tracebank.collect import CollectConfig, parse_since
from tracebank.collect.errors import CollectUsageError
from tracebank.collect.source import check_url


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1700000000", 1_700_000_000.0),
        ("1700000000.5", 1_700_000_000.5),
        ("2023-11-14", 1_699_920_000.0),
        ("2023-11-14T22:13:20Z", 1_700_000_000.0),
        ("2023-11-14T23:13:20+01:00", 1_700_000_000.0),
        ("2023-11-14 22:13:20", 1_700_000_000.0),
    ],
)
def test_since(text, expected):
    assert parse_since(text) == expected


def test_bad_since_is_one_line():
    with pytest.raises(CollectUsageError) as err:
        parse_since("last tuesday")
    assert "\n" not in err.value.one_line() and err.value.exit_code == 2


@pytest.mark.parametrize(
    "config",
    [
        CollectConfig(statuses=()),
        CollectConfig(statuses=("ok",)),
        CollectConfig(mode="prod"),
        CollectConfig(attempts="first"),  # type: ignore[arg-type]
        CollectConfig(concurrency=0),
        CollectConfig(rows_per_file=0),
        CollectConfig(retries=-1),
        CollectConfig(connect_timeout_s=0),
        CollectConfig(read_timeout_s=-1),
    ],
)
def test_bad_configs(config):
    with pytest.raises(CollectUsageError):
        config.validate()


def test_defaults_are_valid_and_recorded():
    cfg = CollectConfig().validate()
    assert cfg.filters() == {
        "statuses": ["succeeded"],
        "mode": None,
        "rollout_ids": [],
        "since": None,
        "attempts": "latest",
    }


def test_url_is_normalised():
    assert check_url(" http://127.0.0.1:4747/ ") == "http://127.0.0.1:4747"


@pytest.mark.parametrize("tag", ["a\nb", "a\rb", "\x1b[2J", "", "x" * 101, 5])
def test_a_tag_is_one_printable_line_whoever_calls_collect(tag):
    """The config owns the check, so a caller of tracebank.collect.collect gets it too."""
    with pytest.raises(CollectUsageError, match="invalid --tag"):
        CollectConfig(tag=tag).validate()
