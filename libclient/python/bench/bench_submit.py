#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""What submitting a paged batch costs from Python against the same from C:
write_paged() of N scattered pages and submit(), timed around the two calls
only, through mover.Client and through a C helper (paged_submit.c, built as
$MV_BUILD/libmvc_pybench.so, timing inside C) on the same connection, page
arrays and regions, in the same run. Two modes, medians over the reps:

* stream: batches submitted back to back, C and Python alternating (which
  goes first alternates per round), BATCH_ROUND of them in flight, reaped
  after the round: a server that keeps the mover busy.
* after_wait: each batch submitted after the thread slept in wait() for the
  previous one (reps alternate which side goes first): a server idle
  between requests. Here the thread wakes on a CPU whose caches others used
  meanwhile, which Python's larger code path pays for more.

Prints a table and one BENCH line a mode:

    BENCH python mode=stream op=write_paged+submit pages=65536 ... c_us=X py_us=Y ratio=Y/X pass=0|1

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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import numpy as np  # noqa: E402

import mover  # noqa: E402
from mover import _lib  # noqa: E402
from mover.local import LocalMover  # noqa: E402

BAR = 1.1
BATCH_ROUND = 8  # batches a side in flight per stream round


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
    ap.add_argument("--reps", type=int, default=40, help="timed batches a side and mode")
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
    results: dict[str, tuple[list[float], list[float]]] = {}

    with LocalMover(args.provider, 1) as ma, LocalMover(args.provider, 1) as mb, \
            mover.Client(ma.sock) as a, mover.Client(mb.sock) as b, \
            a.alloc(n * ps) as src, b.alloc(n * ps) as dst:
        imp = a.import_region(a.peer_add(b.address()), dst.blob())
        cp = _lib.mvc_pages(src=src.id, dst=imp.id, src_stride=ps, dst_stride=ps, page_size=ps,
                            src_pages=sp.ctypes.data, dst_pages=dp.ctypes.data, npages=n)
        cookie = 0

        def run_c() -> float:
            nonlocal cookie
            cookie += 1
            ns = h.mvb_paged_submit(a._c, wp, sub, ctypes.byref(cp), cookie)
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

        def reap_all() -> None:
            while a.inflight:
                for e in a.wait(30):
                    e.raise_for_status()

        # Warm-up: every arena byte the runs use, the rings, both paths.
        for _ in range(3):
            for _ in range(BATCH_ROUND):
                run_c(), run_py()
            reap_all()

        cs, pys = [], []
        for r in range(max(1, args.reps // BATCH_ROUND)):
            for _ in range(BATCH_ROUND):
                if r % 2:
                    cs.append(run_c())
                    pys.append(run_py())
                else:
                    pys.append(run_py())
                    cs.append(run_c())
            reap_all()
        results["stream"] = (cs, pys)

        cs, pys = [], []
        for i in range(args.reps):
            for side in ((run_c, cs), (run_py, pys)) if i % 2 else ((run_py, pys), (run_c, cs)):
                side[1].append(side[0]())
                reap_all()
        results["after_wait"] = (cs, pys)

    print(f"paged submit: write_paged + submit of {n} pages of {ps} B, {args.provider}, "
          f"medians (quartiles), us")
    print(f"  {'mode':<11} {'C':>22} {'Python':>22} {'Python/C':>9}")
    lines = []
    for mode, (cs, pys) in results.items():
        c_us, py_us = statistics.median(cs), statistics.median(pys)
        ratio = py_us / c_us
        (c1, c3), (p1, p3) = quartiles(cs), quartiles(pys)
        print(f"  {mode:<11} {c_us:8.1f} ({c1:5.1f}-{c3:5.1f}) {py_us:8.1f} ({p1:5.1f}-{p3:5.1f}) "
              f"{ratio:9.3f}")
        lines.append(f"BENCH python mode={mode} op=write_paged+submit pages={n} page_size={ps} "
                     f"provider={args.provider} reps={len(cs)} c_us={c_us:.1f} py_us={py_us:.1f} "
                     f"ratio={ratio:.3f} pass={int(ratio <= BAR)}")
    print(f"  bar: Python/C <= {BAR}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
