#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""What submitting a batch of one paged write costs from Python against the
same from C: N scattered pages, timed around the calls only. Six sides, on
the same connection, page arrays and regions, in the same run:

* c: a C helper (paged_submit.c, built as $MV_BUILD/libmvc_pybench.so)
  calls mvc_write_paged() and mvc_submit() with a prepared struct and times
  them inside C: what a C server pays.
* py: mover.Client.submit_paged(src, dst, src_pages, dst_pages, page_size,
  cookie=...), numpy page arrays, timed in Python: what a Python server
  pays when it passes the same page arrays again (a layer loop over one
  request's pages). One foreign call (mvc_submit_paged_objs: libmvc reads
  the arrays' headers).
* py_new: the same with page arrays it has not seen (new views of the same
  numbers each call, made before the timer starts): a new request's pages,
  which take the same path.
* py2: write_paged() then submit(), the same arrays again: the two-call
  form, shown, not judged.
* prep: a PagedWrite made once by Client.paged() with the same arrays,
  its submit(base, base, cookie=...) timed: the prepared form a layer loop
  can use, shown, not judged.
* ffi: mvc_submit_paged() through bare ctypes with the struct and the
  arguments prepared beforehand (no argtypes: no conversion), timed in
  Python: the floor any ctypes binding pays (the foreign call itself), so a
  reader sees how much of py's time is the binding and how much the FFI.

Each side sends two batches of the same pages a rep, as a loop over a
request's layers would (bases 0, then half a region up). Two modes; in
each, every rep runs the sides one after the other, the side that goes
first rotating, and the figures are medians over the reps;
ratio is median(py) / median(c) (ratio_new: py_new's; ratio2: py2's), and
its quartiles are those of the per-rep ratios py/c (pairs taken in the same
rep, so a noisy moment moves both):

* stream: batches submitted back to back, BATCH_ROUND reps in flight, reaped
  after the round: a server that keeps the mover busy. Times each side's
  second batch.
* after_wait: each side runs after the thread slept in wait() for every
  batch before it: a server idle between requests. Times each side's first
  batch (a new request: py's arrays are new to the client). Here each call
  starts with cold caches (the thread slept while the movers copied), which
  costs Python's larger code path more than C's: the foreign calls alone
  (ffi) cost more than the bar there on the 16-core device, so this mode is
  reported beside its ffi floor, not judged (goal=0).

Prints a table and one BENCH line a mode:

    BENCH python mode=stream op=submit_paged pages=65536 ... c_us=X py_us=Y
          py_new_us=W py2_us=V ffi_us=Z ratio=Y/X ratio_new=W/X ratio_q1=..
          ratio_q3=.. ratio2=V/X prep_us=P ratio_prep=P/X ffi_ratio=Z/X goal=1|0
          pass=0|1

(bar, stream: ratio and ratio_new <= 1.1). Starts two movers of the build
tree (shm, one shard).
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
BATCH_ROUND = 6  # reps in flight per stream round (8 batches a rep)


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
    ap.add_argument("--reps", type=int, default=300, help="timed reps a mode")
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
            a.alloc(2 * n * ps) as src, b.alloc(2 * n * ps) as dst:
        imp = a.import_region(a.peer_add(b.address()), dst.blob())
        # Every side sends two batches of the same pages a rep, a layer loop's
        # two layers (bases 0, then one region half up), and times the second.
        base = n * ps
        cps = [_lib.mvc_pages(src=src.id, dst=imp.id, src_base=b_, dst_base=b_, src_stride=ps,
                              dst_stride=ps, page_size=ps, src_pages=sp.ctypes.data,
                              dst_pages=dp.ctypes.data, npages=n) for b_ in (0, base)]
        crefs = [ctypes.byref(x) for x in cps]
        ffi_sp = _lib.raw.mvc_submit_paged
        cookie = 0

        # Each side returns both batches' times.
        def run_c() -> tuple[float, ...]:
            nonlocal cookie
            out = []
            for ref in crefs:
                cookie += 1
                ns = h.mvb_paged_submit(a._c, wp, sub, ref, cookie)
                if ns < 0:
                    raise mover.MoverError(-ns, a.error, call="mvc_write_paged")
                out.append(ns / 1e3)
            return tuple(out)

        def py_side(new: bool) -> tuple[float, ...]:
            nonlocal cookie
            out = []
            for b_ in (0, base):
                cookie += 1
                s_, d_ = (sp[:], dp[:]) if new else (sp, dp)  # views: arrays not seen before
                t0 = time.perf_counter_ns()
                a.submit_paged(src, imp, s_, d_, ps, src_base=b_, dst_base=b_, cookie=cookie)
                out.append((time.perf_counter_ns() - t0) / 1e3)
            return tuple(out)

        def run_py2() -> tuple[float, ...]:
            nonlocal cookie
            out = []
            for b_ in (0, base):
                cookie += 1
                t0 = time.perf_counter_ns()
                a.write_paged(src, imp, sp, dp, ps, src_base=b_, dst_base=b_)
                a.submit(cookie)
                out.append((time.perf_counter_ns() - t0) / 1e3)
            return tuple(out)

        pw = a.paged(src, imp, sp, dp, ps)

        def run_prep() -> tuple[float, ...]:
            nonlocal cookie
            out = []
            for b_ in (0, base):
                cookie += 1
                t0 = time.perf_counter_ns()
                pw.submit(b_, b_, cookie=cookie)
                out.append((time.perf_counter_ns() - t0) / 1e3)
            return tuple(out)

        def run_ffi() -> tuple[float, ...]:
            nonlocal cookie
            c = a._c
            out = []
            for ref in crefs:
                cookie += 1
                ck = ctypes.c_uint64(cookie)
                t0 = time.perf_counter_ns()
                ret = ffi_sp(c, ref, ck)
                t1 = time.perf_counter_ns()
                if ret < 0:
                    raise mover.MoverError(-ret, a.error, call="mvc_submit_paged")
                out.append((t1 - t0) / 1e3)
            return tuple(out)

        def reap_all() -> None:
            while a.inflight:
                for e in a.wait(30):
                    e.raise_for_status()

        sides: list[tuple[str, Callable[[], tuple[float, ...]]]] = [
            ("c", run_c), ("py", lambda: py_side(False)), ("py_new", lambda: py_side(True)),
            ("py2", run_py2), ("prep", run_prep), ("ffi", run_ffi)]

        def rep(i: int, out: dict[str, list[float]], wait_each: bool) -> None:
            k = i % len(sides)
            for name, fn in sides[k:] + sides[:k]:
                # A stream times a layer loop's second layer; after a wait,
                # the first call after the sleep.
                out[name].append(fn()[0 if wait_each else 1])
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

    print(f"paged submit: a batch of one paged write of {n} pages of {ps} B, {args.provider}, "
          f"{args.reps} reps a mode, medians (quartiles), us; C: mvc_write_paged + "
          f"mvc_submit, Python: submit_paged (two calls: write_paged + submit)")
    print(f"  {'mode':<11} {'C':>21} {'Python':>21} {'Python, new arrays':>21} "
          f"{'ctypes floor':>21} {'Python/C (quartiles)':>22} {'new/C':>6} {'floor/C':>7} "
          f"{'two calls/C':>11} {'prepared/C':>10}  bar")
    lines = []
    for mode, out in results.items():
        cs, pys, news, ffis = out["c"], out["py"], out["py_new"], out["ffi"]
        c_us, py_us, new_us, ffi_us, py2_us, prep_us = (
            statistics.median(v) for v in (cs, pys, news, ffis, out["py2"], out["prep"]))
        ratio, ratio_new, ffi_ratio = py_us / c_us, new_us / c_us, ffi_us / c_us
        ratio2, ratio_prep = py2_us / c_us, prep_us / c_us
        r1, r3 = quartiles([p / c for p, c in zip(pys, cs)])
        (c1, c3), (p1, p3), (n1, n3), (f1, f3) = (quartiles(v) for v in (cs, pys, news, ffis))
        goal = mode == "stream"
        ok = ratio <= BAR and ratio_new <= BAR
        verdict = ("ok" if ok else "MISS") if goal else "-"
        print(f"  {mode:<11} {c_us:7.1f} ({c1:5.1f}-{c3:5.1f}) {py_us:7.1f} ({p1:5.1f}-{p3:5.1f}) "
              f"{new_us:7.1f} ({n1:5.1f}-{n3:5.1f}) {ffi_us:7.1f} ({f1:5.1f}-{f3:5.1f}) "
              f"{ratio:7.3f} ({r1:5.3f}-{r3:5.3f}) {ratio_new:6.3f} {ffi_ratio:7.3f} "
              f"{ratio2:11.3f} {ratio_prep:10.3f}  {verdict}")
        lines.append(f"BENCH python mode={mode} op=submit_paged pages={n} page_size={ps} "
                     f"provider={args.provider} reps={len(cs)} c_us={c_us:.1f} py_us={py_us:.1f} "
                     f"py_new_us={new_us:.1f} py2_us={py2_us:.1f} ffi_us={ffi_us:.1f} "
                     f"ratio={ratio:.3f} ratio_new={ratio_new:.3f} ratio_q1={r1:.3f} "
                     f"ratio_q3={r3:.3f} ratio2={ratio2:.3f} prep_us={prep_us:.1f} "
                     f"ratio_prep={ratio_prep:.3f} ffi_ratio={ffi_ratio:.3f} "
                     f"goal={int(goal)} pass={int(ok)}")
    print(f"  bar: Python/C <= {BAR} in a stream, same arrays and new ones; after a wait is "
          f"shown beside its ctypes floor (the foreign call alone), not judged")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
