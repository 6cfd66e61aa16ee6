"""core.user_code: the user's MODULE:FUNCTION, loaded or refused in one line of the caller's error."""

from __future__ import annotations

import pytest
from tracebank.core.errors import UsageError
from tracebank.core.user_code import load_function


class _Flag(UsageError):
    pass


def test_a_file_function_is_loaded(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text("def twice(x):\n    return 2 * x\n")
    assert load_function(f"{path}:twice", "helper", "--helper", _Flag)(4) == 8


@pytest.mark.parametrize(
    "spec, message",
    [
        ("nocolon", "--helper 'nocolon' is not MODULE:FUNCTION"),
        ("json:no_such", "json has no function 'no_such'"),
        ("json:JSONDecodeError.__name__", "has no function"),
        ("no_such_helper_module:f", "cannot import helper module 'no_such_helper_module'"),
    ],
)
def test_a_bad_spec_is_one_line_of_the_callers_error(spec, message):
    with pytest.raises(_Flag, match=message) as info:
        load_function(spec, "helper", "--helper", _Flag)
    assert "\n" not in info.value.one_line()


def test_a_module_that_raises_on_import_is_one_line(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("raise RuntimeError('first\\nsecond')\n")
    with pytest.raises(_Flag, match="RuntimeError: first$") as info:
        load_function(f"{path}:f", "helper", "--helper", _Flag)
    assert "\n" not in info.value.one_line()
