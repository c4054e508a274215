# SPDX-License-Identifier: MIT
"""libmvc through ctypes: finding the library, the structs of mvc.h laid out
as C lays them, and the prototype of every function the binding calls.

The library is, in this order: $MVC_LIBRARY (a path); the build tree's
build/libmvc.so when this package runs from the source tree ($MV_BUILD names
another build directory); libmvc.so.1 beside an installed package
(PREFIX/lib, for PREFIX/lib/pythonX.Y/dist-packages/mover); libmvc.so.1
through the dynamic loader. Nothing here allocates or calls the mover.
"""
from __future__ import annotations

import ctypes
import os
from ctypes import (POINTER, Structure, c_char, c_char_p, c_int, c_size_t, c_uint32, c_uint64,
                    c_void_p)
from pathlib import Path

BLOB_MAX = 8192  # MVC_BLOB_MAX
NAME_MAX = 64  # MVC_NAME_MAX
LAT_BUCKETS = 32  # MVC_LAT_BUCKETS


class mvc_mem(Structure):
    _fields_ = [("region", c_uint32), ("addr", c_void_p), ("len", c_uint64), ("fd", c_int),
                ("flags", c_uint32), ("path", c_uint32)]


class mvc_event(Structure):
    _fields_ = [("type", c_int), ("status", c_int), ("cookie", c_uint64), ("bytes", c_uint64),
                ("imm", c_uint32), ("region", c_uint32), ("count", c_uint32), ("cause", c_int),
                ("msg", c_char * 88)]


class mvc_seg(Structure):
    _fields_ = [("src_off", c_uint64), ("dst_off", c_uint64), ("len", c_uint64)]


class mvc_pages(Structure):
    _fields_ = [("src", c_uint32), ("dst", c_uint32), ("src_base", c_uint64),
                ("dst_base", c_uint64), ("src_stride", c_uint64), ("dst_stride", c_uint64),
                ("page_size", c_uint64), ("src_pages", c_void_p), ("dst_pages", c_void_p),
                ("npages", c_uint32)]


class mvc_array_layout(Structure):
    _fields_ = [("type", c_void_p), ("descr", c_void_p), ("type_at", c_uint32),
                ("data_at", c_uint32), ("nd_at", c_uint32), ("dims_at", c_uint32),
                ("descr_at", c_uint32), ("flags_at", c_uint32), ("flags", c_uint32),
                ("rsvd", c_uint32)]


class mvc_paged_objs(Structure):
    _fields_ = [("src_pages", c_void_p), ("dst_pages", c_void_p), ("src_base", c_uint64),
                ("dst_base", c_uint64), ("cookie", c_uint64)]


class mvc_info(Structure):
    _fields_ = [("client_id", c_uint32), ("nshards", c_uint32), ("max_batches", c_uint32),
                ("mover_id", c_uint64), ("provider", c_char * 32)]


class mvc_opts(Structure):
    _fields_ = [("list_arena", c_uint64), ("share_pct", c_uint32), ("flags", c_uint32),
                ("hugepages", c_uint32), ("rsvd32", c_uint32), ("rsvd", c_uint64 * 5)]


class mvc_mem_info(Structure):
    _fields_ = [("backing", c_uint32), ("page_size", c_uint32), ("alloc_ns", c_uint64),
                ("map_ns", c_uint64), ("mr_ns", c_uint64), ("why", c_char * 192)]


OPT_NO_RECONNECT = 1  # mvc.h MVC_OPT_NO_RECONNECT


class mvc_latency(Structure):
    _fields_ = [("count", c_uint64), ("sum_ns", c_uint64), ("hist", c_uint64 * LAT_BUCKETS)]


class mvc_found(Structure):
    _fields_ = [("peer", c_uint32), ("dst", c_uint32), ("len", c_uint64), ("mover_id", c_uint64)]


# The sizes mvc.h gives these structs on 64-bit Linux: a mismatch means the
# header changed and this file must follow it.
for _s, _n in ((mvc_mem, 40), (mvc_event, 128), (mvc_pages, 72), (mvc_info, 56), (mvc_opts, 64),
               (mvc_latency, 272), (mvc_seg, 24), (mvc_found, 24), (mvc_mem_info, 224),
               (mvc_array_layout, 48), (mvc_paged_objs, 40)):
    if ctypes.sizeof(_s) != _n:
        raise ImportError(f"mover: struct {_s.__name__} is {ctypes.sizeof(_s)} bytes here and "
                          f"{_n} in mvc.h: update mover/_lib.py to the header")

_PROTOTYPES = {
    "mvc_connect_opts": (c_int, [POINTER(c_void_p), c_char_p, POINTER(mvc_opts)]),
    "mvc_version": (c_char_p, []),
    "mvc_connect_error": (c_char_p, []),
    "mvc_disconnect": (None, [c_void_p]),
    "mvc_error": (c_char_p, [c_void_p]),
    "mvc_info": (c_int, [c_void_p, POINTER(mvc_info)]),
    "mvc_alloc": (c_int, [c_void_p, c_uint64, POINTER(mvc_mem)]),
    "mvc_register_fd": (c_int, [c_void_p, c_int, c_uint64, c_uint64, POINTER(mvc_mem)]),
    "mvc_free": (c_int, [c_void_p, POINTER(mvc_mem)]),
    "mvc_alloc_huge": (c_int, [c_void_p, c_uint64, c_int, POINTER(mvc_mem)]),
    "mvc_mem_info": (c_int, [c_void_p, POINTER(mvc_mem), POINTER(mvc_mem_info)]),
    "mvc_register_cuda": (c_int, [c_void_p, c_void_p, c_uint64, POINTER(mvc_mem)]),
    "mvc_address": (c_int, [c_void_p, c_void_p, POINTER(c_size_t)]),
    "mvc_region_blob": (c_int, [c_void_p, c_uint32, c_void_p, POINTER(c_size_t)]),
    "mvc_peer_add": (c_int, [c_void_p, c_void_p, c_size_t, POINTER(c_uint32)]),
    "mvc_peer_remove": (c_int, [c_void_p, c_uint32]),
    "mvc_import": (c_int, [c_void_p, c_uint32, c_void_p, c_size_t, POINTER(c_uint32)]),
    "mvc_unimport": (c_int, [c_void_p, c_uint32]),
    "mvc_publish": (c_int, [c_void_p, c_uint32, c_char_p]),
    "mvc_unpublish": (c_int, [c_void_p, c_char_p]),
    "mvc_lookup": (c_int, [c_void_p, c_char_p, c_int, POINTER(mvc_found)]),
    "mvc_write": (c_int, [c_void_p, c_uint32, c_uint64, c_uint32, c_uint64, c_uint64]),
    "mvc_writev": (c_int, [c_void_p, c_uint32, c_uint32, c_void_p, c_uint32]),
    "mvc_write_paged": (c_int, [c_void_p, POINTER(mvc_pages)]),
    "mvc_write_imm": (c_int, [c_void_p, c_uint32, c_uint32]),
    "mvc_submit": (c_int, [c_void_p, c_uint64]),
    "mvc_submit_paged": (c_int, [c_void_p, POINTER(mvc_pages), c_uint64]),
    "mvc_abort": (None, [c_void_p]),
    "mvc_array_take": (c_int, [POINTER(mvc_array_layout), ctypes.py_object,
                               POINTER(c_void_p), POINTER(c_uint64)]),
    "mvc_write_paged_objs": (c_int, [c_void_p, POINTER(mvc_pages), POINTER(mvc_array_layout),
                                     POINTER(mvc_paged_objs)]),
    "mvc_submit_paged_objs": (c_int, [c_void_p, POINTER(mvc_pages), POINTER(mvc_array_layout),
                                      POINTER(mvc_paged_objs)]),
    "mvc_poll": (c_int, [c_void_p, POINTER(mvc_event), c_int]),
    "mvc_wait": (c_int, [c_void_p, POINTER(mvc_event), c_int, c_int]),
    "mvc_event_fd": (c_int, [c_void_p]),
    "mvc_arm": (c_int, [c_void_p]),
    "mvc_imm_expect": (c_int, [c_void_p, c_uint32, c_uint32, c_uint64]),
    "mvc_imm_expect_from": (c_int, [c_void_p, c_uint32, c_uint32, c_uint32, c_uint64]),
    "mvc_latency": (c_int, [c_void_p, POINTER(mvc_latency)]),
    "mvc_shard_bytes": (c_uint64, [c_void_p, c_uint32]),
    "mvc_shard_descs": (c_uint64, [c_void_p, c_uint32]),
    "mvc_inflight": (c_uint32, [c_void_p]),
}


def _candidates() -> list[str]:
    env = os.environ.get("MVC_LIBRARY")
    if env:
        # An explicit choice: no fallback that would hide a wrong path.
        return [env]
    here = Path(__file__).resolve().parent
    out = []
    root = here.parents[2]  # libclient/python/mover -> the source tree
    if (root / "libclient" / "mvc.h").exists():
        build = Path(os.environ.get("MV_BUILD", "build"))
        out.append(str((build if build.is_absolute() else root / build) / "libmvc.so"))
    # PREFIX/lib/pythonX.Y/dist-packages/mover -> PREFIX/lib
    out.append(str(here.parents[2] / "libmvc.so.1"))
    out.append("libmvc.so.1")
    return out


def _load() -> ctypes.CDLL:
    tried = []
    for cand in _candidates():
        if os.sep in cand and not os.path.exists(cand):
            tried.append(f"{cand} (no such file)")
            continue
        try:
            lib = ctypes.CDLL(cand)
        except OSError as e:
            tried.append(f"{cand} ({e})")
            continue
        for name, (res, args) in _PROTOTYPES.items():
            fn = getattr(lib, name)
            fn.restype = res
            fn.argtypes = args
        lib.path = cand
        return lib
    raise ImportError("mover: libmvc not found; tried " + "; ".join(tried) +
                      ". Build it (make), install it (make install), or set MVC_LIBRARY "
                      "to the path of libmvc.so")


lib = _load()

# The hot path's calls a second time, without argtypes: ctypes then passes
# each argument as the ctypes object it is (a c_void_p, a byref(), a
# c_uint64) with no from_param() conversion, a third less per call (0.74 ->
# 0.47 us for a three-argument call on the 2-core machine). Only for
# arguments made as ctypes objects beforehand: a plain int would go as a C
# int. Returns are the same c_int.
raw = ctypes.CDLL(lib.path)
for _name in ("mvc_write_paged", "mvc_submit", "mvc_submit_paged"):
    getattr(raw, _name).restype = c_int

# The calls that read Python objects (the page arrays' headers), the same
# way but keeping the GIL: another thread cannot reshape or resize an array
# while libmvc reads its header and copies its elements (tens of
# microseconds at 65,536 pages, the same as the calls above take).
held = ctypes.PyDLL(lib.path)
for _name in ("mvc_write_paged_objs", "mvc_submit_paged_objs"):
    getattr(held, _name).restype = c_int
