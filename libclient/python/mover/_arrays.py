# SPDX-License-Identifier: MIT
"""Checks and conversions of the arrays write_paged and writev take, all
vectorised in numpy (no per-element Python work): a C-contiguous uint32 page
array or an (n, 3) uint64 segment array passes through untouched; other
integer arrays are range-checked and converted; anything else is refused with
TypeError (not integers) or ValueError (wrong shape, length or values).

write_paged's fast path hands the page arrays themselves to libmvc, which
takes those it can use as they are by reading their headers where numpy's C
ABI puts them (LAYOUT below, mvc_array_take(3)) instead of this package
asking numpy (dtype comparison, flags object, buffer export) or reading the
headers through ctypes: on 65,536 pages each such Python-level read costs
what a thousand pages of libmvc's own work do
(libclient/python/bench/bench_submit.py measures it)."""
from __future__ import annotations

import ctypes
import sys
from ctypes import byref, c_int, c_ssize_t, c_uint64, c_void_p
from typing import Any

import numpy as np

from . import _lib

U32 = np.dtype(np.uint32)
U64 = np.dtype(np.uint64)
U32_MAX = 0xFFFFFFFF


class _ArrayHead(ctypes.Structure):
    """The start of a numpy array object: CPython's object header, then
    numpy's PyArrayObject_fields (numpy/ndarraytypes.h, the same from numpy
    1.7 through 2.x)."""
    _fields_ = [("ob_refcnt", c_ssize_t), ("ob_type", c_void_p), ("data", c_void_p),
                ("nd", c_int), ("dimensions", c_void_p), ("strides", c_void_p),
                ("base", c_void_p), ("descr", c_void_p), ("flags", c_int)]


C_ALIGNED = 0x0001 | 0x0100  # NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED


def _layout() -> _lib.mvc_array_layout | None:
    """Where libmvc finds a numpy array's fields, once it is shown that
    libmvc then takes exactly the arrays it can use as they are, at numpy's
    own address and length, for arrays on either side of every test it
    makes; None where it cannot be (only CPython's id() is an address, and
    a CPython build with another object header, a free-threaded one say,
    must not be read this way)."""
    if sys.implementation.name != "cpython" or object.__basicsize__ != ctypes.sizeof(c_ssize_t) * 2:
        return None
    h = _ArrayHead
    lay = _lib.mvc_array_layout(type=id(np.ndarray), descr=id(U32), type_at=h.ob_type.offset,
                                data_at=h.data.offset, nd_at=h.nd.offset,
                                dims_at=h.dimensions.offset, descr_at=h.descr.offset,
                                flags_at=h.flags.offset, flags=C_ALIGNED)
    base = np.arange(8, dtype=np.uint32)
    ro = base.copy()
    ro.flags.writeable = False
    data, n = c_void_p(), c_uint64()
    for a in (base, ro, base[2:], base[::2], base.reshape(2, 4), base.reshape(2, 4).T,
              base[:0], base.astype(np.uint64), base.astype(np.int32), base.astype(">u4"),
              np.frombuffer(bytearray(40), np.uint32, 8, 1),  # unaligned
              base.view(type=np.matrix), [1, 2, 3], 7, None):
        want = (type(a) is np.ndarray and a.dtype is U32 and a.ndim == 1 and a.size > 0 and
                a.flags.c_contiguous and a.flags.aligned)
        took = _lib.lib.mvc_array_take(byref(lay), a, byref(data), byref(n)) == 1
        if took != want or (want and (data.value != a.ctypes.data or n.value != a.size)):
            return None
    return lay


# The layout libmvc reads page arrays with: None where it cannot, and then
# every array goes through page_array().
LAYOUT = _layout()


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
    """a as a 1-D C-contiguous aligned uint32 array, without a copy when it is one."""
    if (type(a) is np.ndarray and a.dtype == U32 and a.ndim == 1 and a.flags.c_contiguous and
            a.flags.aligned):
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
    return np.require(a, U32, ["C", "A"])


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


def address(a: np.ndarray) -> int:
    """The address of a C-contiguous array's first element: through a
    ctypes view where the array is writable (a fraction of the cost of
    a.ctypes.data, which goes through numpy's Python-level helpers)."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    except TypeError:  # read-only
        return a.ctypes.data
