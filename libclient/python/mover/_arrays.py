# SPDX-License-Identifier: MIT
"""Checks and conversions of the arrays write_paged and writev take, all
vectorised in numpy (no per-element Python work): a C-contiguous uint32 page
array or an (n, 3) uint64 segment array passes through untouched; other
integer arrays are range-checked and converted; anything else is refused with
TypeError (not integers) or ValueError (wrong shape, length or values)."""
from __future__ import annotations

from typing import Any

import numpy as np

U32 = np.dtype(np.uint32)
U64 = np.dtype(np.uint64)
U32_MAX = 0xFFFFFFFF


def _as_integer_array(a: Any, what: str) -> np.ndarray:
    if isinstance(a, (str, bytes, bytearray)) or a is None:
        raise TypeError(f"{what} must be an array of integers, not {type(a).__name__}")
    if not isinstance(a, np.ndarray):
        try:
            a = np.asarray(a)
        except (TypeError, ValueError, RuntimeError) as e:
            raise TypeError(f"{what} must be an array of integers: {e}") from None
    if a.size == 0:
        raise ValueError(f"{what} is empty")
    if a.dtype.kind not in "ui":
        raise TypeError(f"{what} must hold integers, not {a.dtype}; convert it, "
                        f"e.g. with .astype(numpy.uint32)")
    return a


def page_array(a: Any, what: str) -> np.ndarray:
    """a as a 1-D C-contiguous uint32 array, without a copy when it is one."""
    if type(a) is np.ndarray and a.dtype == U32 and a.ndim == 1 and a.flags.c_contiguous:
        if a.size == 0:
            raise ValueError(f"{what} is empty")
        return a
    a = _as_integer_array(a, what)
    if a.ndim != 1:
        raise ValueError(f"{what} must be one-dimensional, not of shape {a.shape}")
    if a.size > U32_MAX:
        raise ValueError(f"{what} has {a.size} pages; one paged write takes at most {U32_MAX}")
    if a.dtype != U32:
        lo, hi = int(a.min()), int(a.max())
        if lo < 0 or hi > U32_MAX:
            bad = lo if lo < 0 else hi
            raise ValueError(f"{what} holds page {bad}: page numbers are 0 to {U32_MAX}")
    return np.ascontiguousarray(a, dtype=U32)


def segment_array(segs: Any) -> np.ndarray:
    """segs as an (n, 3) C-contiguous uint64 array of (src_off, dst_off, len)."""
    a = _as_integer_array(segs, "segments")
    if a.ndim != 2 or a.shape[1] != 3:
        raise ValueError(f"segments must be of shape (n, 3), (src_off, dst_off, len) rows, "
                         f"not {a.shape}")
    if a.shape[0] > U32_MAX:
        raise ValueError(f"{a.shape[0]} segments; one writev takes at most {U32_MAX}")
    if a.dtype != U64 and int(a.min()) < 0:
        raise ValueError("segments hold a negative offset or length")
    a = np.ascontiguousarray(a, dtype=U64)
    zero = np.flatnonzero(a[:, 2] == 0)
    if zero.size:
        raise ValueError(f"segment {int(zero[0])} has length 0")
    return a
