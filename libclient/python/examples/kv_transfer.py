#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Disaggregated prefill and decode, from Python: a prefill process and a
decode process, each the client of its own mover (two movers, as two hosts,
like `make demo`), moving the KV-cache pages of each request from the
prefill's cache into the decode's, laid out as vLLM lays them out: per layer
a K and a V tensor of [num_pages, page_tokens, kv_heads, head_dim], all
layers in one registered region. Per request the decode side picks free
pages and sends their numbers to the prefill side (out of band: here a pipe);
the prefill side writes the request's K and V into its own free pages, then
one paged write per layer and K/V (2 x layers of them; Client.paged() checks
the request's pages once, each write gives its layer's bases) into the decode
pages and an immediate carrying the request id, all in one batch. The decode
side waits for the immediate and checks every page against what the prefill
side must have computed, then returns the pages to its free list.

    kv_transfer.py [--provider tcp|shm] [--requests N] [--numpy] ...
    kv_transfer.py --prefill-socket A.sock --decode-socket B.sock   # running movers

Torch tensors (torch.frombuffer over the regions) when torch is importable,
numpy arrays with --numpy or without torch. Exit status 0 only if every page
of every request arrived intact.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
from pathlib import Path

try:
    import mover
except ImportError:  # run from the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import mover

import numpy as np

from mover.local import LocalMover


class KVCache:
    """One region holding every layer's K and V, [num_pages, page_tokens,
    kv_heads, head_dim] each, fp16; .kv[layer][0 or 1] are the tensors (torch
    or numpy views of the region)."""

    def __init__(self, client: mover.Client, a, use_torch: bool) -> None:
        self.shape = (a.num_pages, a.page_tokens, a.kv_heads, a.head_dim)
        self.page_bytes = a.page_tokens * a.kv_heads * a.head_dim * 2
        self.tensor_bytes = a.num_pages * self.page_bytes
        self.layers = a.layers
        self.region = client.alloc(2 * a.layers * self.tensor_bytes)
        if use_torch:
            import torch
            t = self.region.torch(torch.float16, (a.layers, 2, *self.shape))
        else:
            t = self.region.numpy(np.float16, (a.layers, 2, *self.shape))
        self.kv = [[t[layer, 0], t[layer, 1]] for layer in range(a.layers)]

    def base(self, layer: int, k_or_v: int) -> int:
        """Where tensor (layer, K or V) starts in the region."""
        return (2 * layer + k_or_v) * self.tensor_bytes


def expected(req: int, layer: int, k_or_v: int, npages: int, a) -> np.ndarray:
    """What prefill computes for a request's pages of one layer's K or V:
    small integers, exact in fp16, different for every request, layer,
    tensor, page and token."""
    page = np.arange(npages, dtype=np.int32).reshape(-1, 1, 1, 1)
    tok = np.arange(a.page_tokens, dtype=np.int32).reshape(1, -1, 1, 1)
    head = np.arange(a.kv_heads, dtype=np.int32).reshape(1, 1, -1, 1)
    v = (req * 131 + layer * 31 + k_or_v * 17 + page * 7 + tok * 3 + head) % 2039
    return np.broadcast_to(v, (npages, a.page_tokens, a.kv_heads, a.head_dim)).astype(np.float16)


def as_tensor(x: np.ndarray, like):
    if isinstance(like, np.ndarray):
        return x
    import torch
    return torch.from_numpy(np.ascontiguousarray(x))


def prefill(sock: str, conn, a) -> None:
    """Computes each request's KV into free pages of its own cache and
    writes them to the decode pages it was told, with the request id as
    immediate."""
    rng = np.random.default_rng(1)
    with mover.Client(sock) as c:
        cache = KVCache(c, a, a.use_torch)
        _, addr, blob = conn.recv()
        dst = c.import_region(c.peer_add(addr), blob)
        conn.send(("ready",))
        free = list(rng.permutation(a.num_pages))
        held: dict[int, np.ndarray] = {}  # request -> its source pages, until its batch completes

        def reap(timeout: float) -> None:
            # A failed batch is this example's failure. A request's source
            # pages go back to the free list only once its batch completed:
            # until then the mover may still be reading them.
            for ev in c.wait(timeout):
                ev.raise_for_status()
                free.extend(int(p) for p in held.pop(ev.cookie))

        while True:
            msg = conn.recv()
            if msg[0] == "stop":
                break
            _, req, dst_pages = msg
            while len(free) < len(dst_pages):
                reap(10)
            src_pages = np.array([free.pop() for _ in range(len(dst_pages))], dtype=np.uint32)
            held[req] = src_pages
            idx = as_tensor(src_pages.astype(np.int64), cache.kv[0][0])
            # The request's pages, checked once; each layer's K and V at its base.
            pw = c.paged(cache.region, dst, src_pages, dst_pages, cache.page_bytes)
            for layer in range(a.layers):
                for kv in (0, 1):
                    cache.kv[layer][kv][idx] = as_tensor(
                        expected(req, layer, kv, len(dst_pages), a), cache.kv[0][0])
                    pw.write(cache.base(layer, kv), cache.base(layer, kv))
            c.write_imm(dst, req)
            c.submit(req)
            while len(held) >= a.window:
                reap(10)
        while held:
            reap(10)


def decode(sock: str, conn, a) -> int:
    """Hands out free pages per request, waits for each request's
    immediate and checks every page; returns the number of bad pages."""
    rng = np.random.default_rng(2)
    bad = pages = 0
    with mover.Client(sock) as c:
        cache = KVCache(c, a, a.use_torch)
        conn.send(("hello", c.address(), cache.region.blob()))
        conn.recv()  # prefill imported our cache
        free = list(rng.permutation(a.num_pages))
        waiting: dict[int, np.ndarray] = {}
        t0 = time.monotonic()
        nxt = done = 0
        while done < a.requests:
            while nxt < a.requests and len(waiting) < a.window:
                n = int(rng.integers(1, a.max_pages + 1))
                if n > len(free):
                    break
                dst_pages = np.array([free.pop() for _ in range(n)], dtype=np.uint32)
                waiting[nxt] = dst_pages
                conn.send(("req", nxt, dst_pages))
                nxt += 1
            ev = c.wait_for(lambda e: e.type == mover.EventType.IMM, timeout=30)
            dst_pages = waiting.pop(ev.imm)
            idx = as_tensor(dst_pages.astype(np.int64), cache.kv[0][0])
            for layer in range(a.layers):
                for kv in (0, 1):
                    got = cache.kv[layer][kv][idx]
                    got = got.numpy() if not isinstance(got, np.ndarray) else got
                    want = expected(ev.imm, layer, kv, len(dst_pages), a)
                    ok = (got == want).reshape(len(dst_pages), -1).all(axis=1)
                    bad += int((~ok).sum())
            pages += len(dst_pages)
            free.extend(int(p) for p in dst_pages)
            done += 1
        secs = time.monotonic() - t0
        conn.send(("stop",))
    nbytes = pages * 2 * a.layers * cache.page_bytes
    print(f"decode: {a.requests} requests, {pages} pages x {2 * a.layers} tensors "
          f"({nbytes / 2**20:.1f} MiB) in {secs:.2f} s ({nbytes / secs / 1e9:.2f} GB/s); "
          f"{'every page verified' if not bad else f'{bad} pages WRONG'} "
          f"({'torch' if a.use_torch else 'numpy'} KV cache)")
    return bad


def run(side: str, sock: str, conn, a, out) -> None:
    try:
        out.put((side, prefill(sock, conn, a) if side == "prefill" else decode(sock, conn, a)))
    except BaseException as e:  # reported by the parent, which exits non-zero
        out.put((side, f"{type(e).__name__}: {e}"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--provider", default="tcp", help="for the movers this starts: tcp or shm")
    ap.add_argument("--prefill-socket", help="a running mover for the prefill side")
    ap.add_argument("--decode-socket", help="a running mover for the decode side")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--page-tokens", type=int, default=16)
    ap.add_argument("--num-pages", type=int, default=512, help="pages of each K or V tensor")
    ap.add_argument("--max-pages", type=int, default=64, help="most pages of one request")
    ap.add_argument("--window", type=int, default=4, help="requests in flight")
    ap.add_argument("--numpy", action="store_true", help="numpy KV caches even with torch")
    a = ap.parse_args()
    a.use_torch = False
    if not a.numpy:
        try:
            import torch  # noqa: F401
            a.use_torch = True
        except ImportError:
            print("kv_transfer: torch is not importable; numpy KV caches")
    if a.max_pages * a.window > a.num_pages:
        ap.error("--max-pages x --window must fit --num-pages")

    movers = []
    if not (a.prefill_socket and a.decode_socket):
        movers = [LocalMover(a.provider, 2), LocalMover(a.provider, 2)]
        a.prefill_socket, a.decode_socket = movers[0].sock, movers[1].sock
    try:
        ctx = mp.get_context("spawn")
        p_end, d_end = ctx.Pipe()
        out = ctx.Queue()
        procs = [ctx.Process(target=run, args=("prefill", a.prefill_socket, p_end, a, out)),
                 ctx.Process(target=run, args=("decode", a.decode_socket, d_end, a, out))]
        for p in procs:
            p.start()
        results = dict(out.get(timeout=300) for _ in procs)
        for p in procs:
            p.join(30)
    finally:
        for m in movers:
            m.stop()
    failed = [f"{side}: {r}" for side, r in results.items() if isinstance(r, str)]
    for f in failed:
        print(f"kv_transfer: {f}", file=sys.stderr)
    return 1 if failed or results.get("decode") else 0


if __name__ == "__main__":
    sys.exit(main())
