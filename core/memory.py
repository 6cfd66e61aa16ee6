"""Handing freed memory back to the operating system between the pieces of a stage.

The transform allocates and frees one piece of rows after another (tens of MB
each), and a silver rebuild one collection after another. Allocators keep
freed memory for reuse: glibc raises its mmap threshold after large frees (so
later pieces come from a heap that does not shrink) and Arrow's mimalloc pool
holds freed pages. Both would make the peak resident set
creep up with the number of pieces, i.e. with the size of the warehouse, when
nothing live does.
"""

from __future__ import annotations

import ctypes
import ctypes.util

import pyarrow as pa

_M_MMAP_THRESHOLD = -3
_libc: ctypes.CDLL | None = None


def _glibc() -> ctypes.CDLL | None:
    global _libc
    if _libc is None:
        name = ctypes.util.find_library("c")
        try:
            lib = ctypes.CDLL(name) if name else None
        except OSError:
            lib = None
        if lib is None or not hasattr(lib, "mallopt") or not hasattr(lib, "malloc_trim"):
            return None
        _libc = lib
    return _libc


def fix_mmap_threshold(nbytes: int = 1 << 20) -> None:
    """Serve every allocation of ``nbytes`` or more with its own mapping, returned on free (glibc only)."""
    lib = _glibc()
    if lib is not None:
        lib.mallopt(_M_MMAP_THRESHOLD, nbytes)


def release() -> None:
    """Return memory the allocators hold but no object uses (Arrow's pool, glibc's heap)."""
    pa.default_memory_pool().release_unused()
    lib = _glibc()
    if lib is not None:
        lib.malloc_trim(0)
