# SPDX-License-Identifier: MIT
"""Round trips between two movers, over tcp and over shm: write, writev and
write_paged batches with immediates, every byte checked on the receiver;
imm_expect, batch failures as events, and the batch-building errors libmvc
reports."""
from __future__ import annotations

import contextlib
import errno

import numpy as np
import pytest

import mover

PAGE = 4096


def fill(p, seed: int) -> np.ndarray:
    a = np.random.default_rng(seed).integers(0, 256, p.src.nbytes, dtype=np.uint8)
    p.src.numpy()[:] = a
    p.dst.numpy()[:] = 0
    return a


def land(p, imm: int, timeout: float = 10) -> mover.Event:
    """Ends the open batch with an immediate, submits it and waits for both
    sides: the batch's event on the sender, the immediate on the receiver
    (on shm a batch completes when its writes were sent, so only the
    immediate says they landed). Returns the batch's event."""
    p.a.write_imm(p.imp, imm)
    ev = p.a.wait_batch(p.a.submit(), timeout=timeout)
    recv_imm(p, imm)
    return ev


def recv_imm(p, imm: int) -> mover.Event:
    ev = p.b.wait_for(lambda e: e.type == mover.EventType.IMM, timeout=10)
    assert ev.imm == imm and ev.region == p.dst.id
    return ev


def test_write_lands_and_its_immediate_follows(pair):
    src = fill(pair, 1)
    pair.a.write(pair.src, 100, pair.imp, 5000, 70000)
    pair.a.write_imm(pair.imp, 0xDEADBEEF)
    ck = pair.a.submit()
    ev = pair.a.wait_batch(ck, timeout=10)
    assert ev.ok and ev.bytes == 70000 and ev.cookie == ck
    recv_imm(pair, 0xDEADBEEF)
    dst = pair.dst.numpy()
    assert np.array_equal(dst[5000:75000], src[100:70100])
    assert not dst[:5000].any() and not dst[75000:].any()
    assert sum(pair.a.shard_bytes(s) for s in range(2)) == 70000
    assert pair.a.inflight == 0


def test_a_striped_megabyte_write_lands_whole(pair):
    src = fill(pair, 2)
    pair.a.write(pair.src.id, 0, pair.imp.id, 0, 1 << 20)
    land(pair, 77)
    assert np.array_equal(pair.dst.numpy(), src)
    descs = [pair.a.shard_descs(s) for s in range(2)]
    # shm gathers a batch with an immediate onto one shard (README: Providers).
    assert all(descs) if pair.ma.provider == "tcp" else sum(descs) > 0, descs


@pytest.mark.parametrize("n", [3, 1000])  # inline descriptors, and a list by reference
def test_writev_lands_every_segment(pair, n):
    src = fill(pair, 3)
    rng = np.random.default_rng(n)
    slots = rng.permutation(256)[:n] * 4096 if n <= 256 else rng.permutation(1000) * 1024
    segs = np.stack([np.arange(n, dtype=np.uint64) * 1024,
                     slots.astype(np.uint64),
                     np.full(n, 1000, dtype=np.uint64)], axis=1)
    pair.a.writev(pair.src, pair.imp, segs if n > 3 else [tuple(map(int, s)) for s in segs])
    ev = land(pair, n)
    assert ev.bytes == 1000 * n
    dst = pair.dst.numpy()
    for so, do, ln in segs.astype(np.int64):
        assert np.array_equal(dst[do:do + ln], src[so:so + ln])


@pytest.mark.parametrize("npages", [8, 256])  # inline runs, and a list by reference
def test_write_paged_moves_scattered_pages(pair, npages):
    src = fill(pair, 4)
    rng = np.random.default_rng(npages)
    sp = rng.permutation(256)[:npages].astype(np.uint32)
    dp = rng.permutation(256)[:npages].astype(np.uint32)
    pair.a.write_paged(pair.src, pair.imp, sp, dp, PAGE)
    ev = land(pair, npages)
    assert ev.bytes == npages * PAGE
    s = src.reshape(256, PAGE)
    d = pair.dst.numpy().reshape(256, PAGE)
    assert np.array_equal(d[dp], s[sp])
    untouched = np.setdiff1d(np.arange(256), dp)
    assert not d[untouched].any()


def test_write_paged_takes_bases_strides_and_any_integer_arrays(tcp_pair):
    p = tcp_pair
    src = fill(p, 5)
    # 100-byte pages, 1000 apart on the source from 7, 512 apart on the
    # destination from 3; the page numbers as a list, an int64 and a
    # non-contiguous uint16 view.
    sp = [5, 0, 900, 17] * 10
    dp = np.arange(40, dtype=np.int64)
    p.a.write_paged(p.src, p.imp, sp, dp, 100, src_base=7, dst_base=3, src_stride=1000,
                    dst_stride=512)
    dp16 = np.arange(80, dtype=np.uint16)[::2] + 100
    p.a.write_paged(p.src, p.imp, np.array(sp, dtype=np.int32), dp16, 100, src_base=7,
                    dst_base=3, src_stride=1000, dst_stride=512)
    # Read-only uint32 arrays (their address comes another way).
    ro_src = np.frombuffer(np.array(sp, dtype=np.uint32).tobytes(), dtype=np.uint32)
    ro_dst = np.frombuffer((np.arange(40, dtype=np.uint32) + 200).tobytes(), dtype=np.uint32)
    assert not ro_src.flags.writeable
    p.a.write_paged(p.src, p.imp, ro_src, ro_dst, 100, src_base=7, dst_base=3, src_stride=1000,
                    dst_stride=512)
    land(p, 5)
    d = p.dst.numpy()
    for i, s in enumerate(sp):
        for dpage in (i, 100 + 2 * i, 200 + i):
            o = 3 + dpage * 512
            assert np.array_equal(d[o:o + 100], src[7 + s * 1000:7 + s * 1000 + 100])


def test_sixty_five_thousand_pages_in_one_batch(tcp_pair):
    p = tcp_pair
    src = fill(p, 6)
    n = 65536
    page = 16  # 1 MiB of 16-byte pages: many pages, few bytes
    rng = np.random.default_rng(9)
    sp = rng.permutation(n).astype(np.uint32)
    dp = rng.permutation(n).astype(np.uint32)
    p.a.write_paged(p.src, p.imp, sp, dp, page)
    ev = land(p, 6, timeout=30)
    assert ev.bytes == n * page
    s = src.reshape(n, page)
    assert np.array_equal(p.dst.numpy().reshape(n, page)[dp], s[sp])


def test_imm_expect_counts_immediates_of_several_batches(pair):
    pair.b.imm_expect(42, 3, cookie=555)
    for i in range(3):
        pair.a.write(pair.src, i * 10, pair.imp, i * 10, 10)
        pair.a.write_imm(pair.imp, 42)
        pair.a.submit()
    for _ in range(3):
        pair.a.wait_for(lambda e: e.type == mover.EventType.BATCH, timeout=10).raise_for_status()
    ev = pair.b.wait_for(lambda e: e.type == mover.EventType.IMM_COUNT, timeout=10)
    assert (ev.imm, ev.count, ev.cookie) == (42, 3, 555)
    assert "IMM_COUNT" in repr(ev)
    assert pair.b.latency().count == 3
    with pytest.raises(ValueError):
        pair.b.imm_expect(42, 0)
    pair.b.imm_expect(43, 2)
    with pytest.raises(mover.MoverError) as ei:
        pair.b.imm_expect(43, 1)
    assert ei.value.errno == errno.EBUSY and "already being counted" in ei.value.message


def test_a_lone_immediate_is_a_batch(pair):
    pair.a.write_imm(pair.imp, 9)
    ev = pair.a.wait_batch(pair.a.submit(), timeout=10)
    assert ev.bytes == 0
    recv_imm(pair, 9)


def test_poll_and_wait_return_events_as_objects(tcp_pair):
    p = tcp_pair
    assert p.a.poll() == [] and p.a.wait(0.01) == []
    p.a.write(p.src, 0, p.imp, 0, 4096)
    ck = p.a.submit(1234)
    assert ck == 1234 and p.a.inflight == 1
    evs = []
    while not evs:
        evs = p.a.wait(10, max_events=1)
    (ev,) = evs
    assert ev == mover.Event(mover.EventType.BATCH, cookie=1234, bytes=4096)
    assert ev.ok and ev.error() is None and ev.raise_for_status() is ev
    assert "cookie=1234" in repr(ev)
    with pytest.raises(ValueError):
        p.a.poll(max_events=0)
    with pytest.raises(ValueError):
        p.a.wait(-1)
    with pytest.raises(TypeError):
        p.a.wait("1")


def test_wait_for_keeps_other_events_for_the_next_wait(tcp_pair):
    p = tcp_pair
    cks = []
    for i in range(3):
        p.a.write(p.src, 0, p.imp, i * 4096, 4096)
        cks.append(p.a.submit())
    assert p.a.wait_batch(cks[2], timeout=10).cookie == cks[2]
    got = set()
    while len(got) < 2:
        got |= {e.cookie for e in p.a.wait(10)}
    assert got == {cks[0], cks[1]}
    with pytest.raises(TimeoutError):
        p.a.wait_batch(999, timeout=0.05)


def test_pages_past_the_destination_fail_the_batch_with_the_movers_words(pair):
    pair.a.write_paged(pair.src, pair.imp, np.arange(20, dtype=np.uint32),
                       np.arange(300, 320, dtype=np.uint32), PAGE)
    ck = pair.a.submit()
    with pytest.raises(mover.MoverError) as ei:
        pair.a.wait_batch(ck, timeout=10)
    e = ei.value
    assert e.call == "batch" and e.cause == mover.Cause.BOUNDS and e.errno != 0
    assert "exceeds" in e.message or "outside" in e.message, e.message
    assert "BOUNDS" in str(e)


def test_a_write_to_an_unimported_handle_fails_its_batch(tcp_pair):
    p = tcp_pair
    p.imp.unimport()
    p.a.write(p.src, 0, p.imp.id, 0, 4096)
    p.a.submit()
    ev = p.a.wait_for(lambda e: e.type == mover.EventType.BATCH, timeout=10)
    assert not ev.ok and ev.cause == mover.Cause.NO_IMPORT and ev.msg
    assert isinstance(ev.error(), mover.MoverError)


def test_batch_building_errors_come_from_libmvc(tcp_pair):
    p = tcp_pair
    with pytest.raises(mover.MoverError) as ei:
        p.a.submit()
    assert ei.value.errno == errno.EINVAL and "no open batch" in ei.value.message
    p.a.write_imm(p.imp, 1)
    with pytest.raises(mover.MoverError) as ei:
        p.a.write_imm(p.imp, 2)
    assert ei.value.errno == errno.EBUSY
    p.a.abort()
    with pytest.raises(mover.MoverError):
        p.a.submit()
    p.a.abort()  # nothing open: a no-op


@contextlib.contextmanager
def small_arena_client(p):
    """A second client of p's sender mover with a 64 KiB list arena, a
    region and p's destination imported, and 128 KiB of page numbers: more
    than its arena holds. Yields (client, region, import, pages)."""
    with mover.Client(p.ma.sock, list_arena=64 << 10) as c:
        r = c.alloc(1 << 20)
        imp = c.import_region(c.peer_add(p.b.address()), p.dst.blob())
        yield c, r, imp, np.arange(16384, dtype=np.uint32)


def test_a_batch_larger_than_the_list_arena_is_e2big(tcp_pair):
    p = tcp_pair
    with small_arena_client(p) as (c, r, imp, pages):
        with pytest.raises(mover.MoverError) as ei:
            c.write_paged(r, imp, pages, pages, 16)
        assert ei.value.errno == errno.E2BIG and ei.value.message

