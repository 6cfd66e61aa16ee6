"""numpy/Arrow conversions that import neither pandas nor pyarrow.compute."""

from __future__ import annotations

import pyarrow as pa
import pytest
from tracebank.core.arrowutil import narrow_strings


@pytest.mark.parametrize(
    "values",
    [["a", None, "bcd", "", "é€"], [], [None, None], ["x" * 1000, "y"]],
)
@pytest.mark.parametrize("cut", [(0, None), (1, 3), (2, None)])
def test_narrowed_strings_equal_arrows_cast(values, cut):
    wide = pa.array(values, pa.large_string())
    start, length = cut
    wide = wide.slice(start, length)
    narrow = narrow_strings(wide)
    assert narrow.type == pa.string()
    narrow.validate(full=True)
    assert narrow.equals(wide.cast(pa.string()))
    assert narrow.to_pylist() == wide.to_pylist()


def test_narrowing_refuses_other_types():
    assert narrow_strings(pa.array(["a"], pa.string())).to_pylist() == ["a"]
    with pytest.raises(TypeError, match="large_string"):
        narrow_strings(pa.array([1, 2]))
