#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""What submitting a paged batch costs from Python against the same from C:
write_paged() of N scattered pages and submit(), timed around the two calls
only. Three sides, on the same connection, page arrays and regions, in the
same run:

* c: a C helper (paged_submit.c, built as $MV_BUILD/libmvc_pybench.so)
  calls mvc_write_paged() and mvc_submit() with a prepared struct and times
  them inside C: what a C server pays.
* py: mover.Client.write_paged(src, dst, src_pages, dst_pages, page_size)
  and Client.submit(cookie), numpy page arrays, timed in Python: what a
  Python server pays.
* ffi: the same two libmvc calls through bare ctypes with the struct
  prepared beforehand, timed in Python: the floor any ctypes binding pays
  (the foreign calls themselves), so a reader sees how much of py's time is
  the binding and how much the FFI.

Two modes; in each, every rep runs the three sides one after the other, the
side that goes first rotating, and the figures are medians over the reps;
ratio is median(py) / median(c), and its quartiles are those of the per-rep
ratios py/c (pairs taken in the same rep, so a noisy moment moves both):

* stream: batches submitted back to back, BATCH_ROUND reps in flight, reaped
  after the round: a server that keeps the mover busy.
* after_wait: each side runs after the thread slept in wait() for every
  batch before it: a server idle between requests. Here each call starts
  with cold caches (the thread slept while the movers copied), which costs
  Python's larger code path more than C's.

Prints a table and one BENCH line a mode:

    BENCH python mode=stream op=write_paged+submit pages=65536 ... c_us=X py_us=Y
          ffi_us=Z ratio=Y/X ratio_q1=.. ratio_q3=.. pass=0|1

(bar: ratio <= 1.1). Starts two movers of the build tree (shm, one shard).
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

try:
    import numpy as np
except ImportError as e:  # the binding needs numpy: no row, and the reason
    print(f"bench_submit: skipped: {sys.executable} has no numpy ({e}); on Debian: "
          f"apt install python3-numpy")
    sys.exit(0)

import mover  # noqa: E402
from mover import _lib  # noqa: E402
from mover.local import LocalMover  # noqa: E402

BAR = 1.1
BATCH_ROUND = 8  # reps in flight per stream round (3 batches a rep)


def helper() -> ctypes.CDLL:
    root = HERE.parents[2]
    build = Path(os.environ.get("MV_BUILD", "build"))
    so = (build if build.is_absolute() else root / build) / "libmvc_pybench.so"
    if not so.exists():
        sys.exit(f"bench_submit: {so} is not built: run make bench (or make {so})")
    h = ctypes.CDLL(str(so))
    h.mvb_paged_submit.restype = ctypes.c_int64
    h.mvb_paged_submit.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                   ctypes.POINTER(_lib.mvc_pages), ctypes.c_uint64]
    return h


def quartiles(v: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(v, n=4)
    return q[0], q[2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, default=65536)
    ap.add_argument("--page-size", type=int, default=64,
                    help="bytes a page (the submission cost does not depend on it)")
    ap.add_argument("--reps", type=int, default=200, help="timed reps a mode")
    ap.add_argument("--provider", default="shm")
    args = ap.parse_args()

    h = helper()
    lib = _lib.lib
    wp = ctypes.cast(lib.mvc_write_paged, ctypes.c_void_p)
    sub = ctypes.cast(lib.mvc_submit, ctypes.c_void_p)
    n, ps = args.pages, args.page_size
    rng = np.random.default_rng(1)
    sp = rng.permutation(n).astype(np.uint32)
    dp = rng.permutation(n).astype(np.uint32)
    results: dict[str, dict[str, list[float]]] = {}

    with LocalMover(args.provider, 1) as ma, LocalMover(args.provider, 1) as mb, \
            mover.Client(ma.sock) as a, mover.Client(mb.sock) as b, \
            a.alloc(n * ps) as src, b.alloc(n * ps) as dst:
        imp = a.import_region(a.peer_add(b.address()), dst.blob())
        cp = _lib.mvc_pages(src=src.id, dst=imp.id, src_stride=ps, dst_stride=ps, page_size=ps,
                            src_pages=sp.ctypes.data, dst_pages=dp.ctypes.data, npages=n)
        cpref = ctypes.byref(cp)
        ffi_wp, ffi_sub = lib.mvc_write_paged, lib.mvc_submit
        cookie = 0

        def run_c() -> float:
            nonlocal cookie
            cookie += 1
            ns = h.mvb_paged_submit(a._c, wp, sub, cpref, cookie)
            if ns < 0:
                raise mover.MoverError(-ns, a.error, call="mvc_write_paged")
            return ns / 1e3

        def run_py() -> float:
            nonlocal cookie
            cookie += 1
            t0 = time.perf_counter_ns()
            a.write_paged(src, imp, sp, dp, ps)
            a.submit(cookie)
            return (time.perf_counter_ns() - t0) / 1e3

        def run_ffi() -> float:
            nonlocal cookie
            cookie += 1
            c = a._c
            t0 = time.perf_counter_ns()
            ret = ffi_wp(c, cpref)
            if not ret:
                ret = ffi_sub(c, cookie)
            t1 = time.perf_counter_ns()
            if ret < 0:
                raise mover.MoverError(-ret, a.error, call="mvc_write_paged")
            return (t1 - t0) / 1e3

        def reap_all() -> None:
            while a.inflight:
                for e in a.wait(30):
                    e.raise_for_status()

        sides: list[tuple[str, Callable[[], float]]] = [("c", run_c), ("py", run_py),
                                                         ("ffi", run_ffi)]

        def rep(i: int, out: dict[str, list[float]], wait_each: bool) -> None:
            k = i % len(sides)
            for name, fn in sides[k:] + sides[:k]:
                out[name].append(fn())
                if wait_each:
                    reap_all()

        # Warm-up: every arena byte the runs use, the rings, every path.
        for i in range(3 * BATCH_ROUND):
            rep(i, {name: [] for name, _ in sides}, False)
            if i % BATCH_ROUND == BATCH_ROUND - 1:
                reap_all()

        out: dict[str, list[float]] = {name: [] for name, _ in sides}
        for i in range(args.reps):
            rep(i, out, False)
            if i % BATCH_ROUND == BATCH_ROUND - 1:
                reap_all()
        reap_all()
        results["stream"] = out

        out = {name: [] for name, _ in sides}
        for i in range(args.reps):
            rep(i, out, True)
        results["after_wait"] = out

    print(f"paged submit: write_paged + submit of {n} pages of {ps} B, {args.provider}, "
          f"{args.reps} reps a mode, medians (quartiles), us")
    print(f"  {'mode':<11} {'C':>21} {'Python':>21} {'ctypes floor':>21} "
          f"{'Python/C (quartiles)':>22}")
    lines = []
    for mode, out in results.items():
        cs, pys, ffis = out["c"], out["py"], out["ffi"]
        c_us, py_us, ffi_us = (statistics.median(v) for v in (cs, pys, ffis))
        ratio = py_us / c_us
        r1, r3 = quartiles([p / c for p, c in zip(pys, cs)])
        (c1, c3), (p1, p3), (f1, f3) = quartiles(cs), quartiles(pys), quartiles(ffis)
        print(f"  {mode:<11} {c_us:7.1f} ({c1:5.1f}-{c3:5.1f}) {py_us:7.1f} ({p1:5.1f}-{p3:5.1f}) "
              f"{ffi_us:7.1f} ({f1:5.1f}-{f3:5.1f}) {ratio:7.3f} ({r1:5.3f}-{r3:5.3f})")
        lines.append(f"BENCH python mode={mode} op=write_paged+submit pages={n} page_size={ps} "
                     f"provider={args.provider} reps={len(cs)} c_us={c_us:.1f} py_us={py_us:.1f} "
                     f"ffi_us={ffi_us:.1f} ratio={ratio:.3f} ratio_q1={r1:.3f} ratio_q3={r3:.3f} "
                     f"pass={int(ratio <= BAR)}")
    print(f"  bar: Python/C <= {BAR}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
