"""numpy/Arrow conversions that never import pandas.

pyarrow imports pandas (about 0.3 s) the first time ``pa.array(...)``,
``pa.scalar(...)``, ``Array.to_numpy()``, ``Table.from_pylist`` or a compute
call with a Python scalar runs. A ``tracebank transform`` is a fresh process
that has no other use for pandas, so the transform builds its arrays from
buffers instead. Likewise ``Array.cast`` imports ``pyarrow.compute`` (about 0.08 s, its kernels'
Python wrappers are generated at import): :func:`narrow_strings` is the one cast the transform's
write path needs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

_ARROW_TYPES: dict[np.dtype[Any], pa.DataType] = {
    np.dtype(np.int32): pa.int32(),
    np.dtype(np.int64): pa.int64(),
    np.dtype(np.float64): pa.float64(),
}
_NUMPY_TYPES: dict[str, np.dtype[Any]] = {str(t): d for d, t in _ARROW_TYPES.items()}


def arrow_ints(values: np.ndarray) -> pa.Array:
    """A numpy int32/int64/float64 array as an Arrow array, without a copy."""
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(_ARROW_TYPES[values.dtype], len(values), [None, pa.py_buffer(values)])


def numpy_view(arr: pa.Array) -> np.ndarray:
    """A read-only numpy view of an int32/int64/float64 Arrow array without nulls."""
    if arr.null_count:
        raise ValueError("numpy_view needs an array without nulls")
    dtype = _NUMPY_TYPES[str(arr.type)]
    data = arr.buffers()[1]
    if data is None:
        return np.zeros(0, dtype)
    return np.frombuffer(memoryview(data), dtype)[arr.offset : arr.offset + len(arr)]


def repeat_string(value: str, n: int) -> pa.Array:
    """``n`` copies of ``value`` as a string array."""
    data = value.encode()
    offsets = np.arange(n + 1, dtype=np.int64) * len(data)
    if offsets[-1] > 2**31 - 1:
        return pa.Array.from_buffers(
            pa.large_string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data * n)]
        )
    return pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data * n)]
    )


def string_scalar(value: str | None) -> pa.Scalar:
    """``value`` (or a null) as a string scalar, for compute functions."""
    if value is None:
        return pa.nulls(1, pa.string())[0]
    return repeat_string(value, 1)[0]


def narrow_strings(arr: pa.Array) -> pa.Array:
    """A ``large_string`` array (what polars hands over) as ``string``, without ``pyarrow.compute``.

    The values and validity buffers are shared; only the offsets are narrowed.
    """
    if arr.type == pa.string():
        return arr
    if arr.type != pa.large_string():
        raise TypeError(f"narrow_strings needs a large_string array, not {arr.type}")
    validity, offsets, data = arr.buffers()
    end = arr.offset + len(arr) + 1
    wide = (
        np.frombuffer(memoryview(offsets), np.int64)[:end] if offsets is not None else np.zeros(end, np.int64)
    )
    if wide[-1] > 2**31 - 1:
        raise ValueError("more than 2 GiB of text does not fit a string array")
    buffers = [validity, pa.py_buffer(wide.astype(np.int32)), data if data is not None else pa.py_buffer(b"")]
    return pa.Array.from_buffers(pa.string(), len(arr), buffers, arr.null_count, arr.offset)
