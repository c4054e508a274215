# SPDX-License-Identifier: MIT
"""Bad input is refused before it reaches the mover (TypeError, ValueError);
what the mover refuses becomes MoverError with its words; context managers
free what an exception leaves behind; a mover that goes away is reported."""
from __future__ import annotations

import errno
import os
import pickle
import time

import numpy as np
import pytest

import mover

GOOD = np.arange(4, dtype=np.uint32)


def refused_before_the_mover(p, exc, call, match=None):
    """call raises exc, and nothing of it reached libmvc: no batch is open."""
    with pytest.raises(exc, match=match):
        call()
    with pytest.raises(mover.MoverError, match="no open batch"):
        p.a.submit()


@pytest.mark.parametrize("bad, exc, match", [
    (np.arange(4, dtype=np.float32), TypeError, "integers"),
    (np.ones(4, dtype=bool), TypeError, "integers"),
    (np.array(["a", "b"]), TypeError, "integers"),
    ("0123", TypeError, "array of integers"),
    (None, TypeError, "array of integers"),
    (object(), TypeError, "integers"),
    ([1.5, 2.5, 3.5, 4.5], TypeError, "integers"),
    (np.zeros((2, 2), dtype=np.uint32), ValueError, "one-dimensional"),
    (np.array([], dtype=np.uint32), ValueError, "empty"),
    ([], ValueError, "empty"),
    (np.array([0, -1, 2, 3], dtype=np.int64), ValueError, "page -1"),
    (np.array([0, 1 << 32, 2, 3], dtype=np.uint64), ValueError, "page 4294967296"),
])
def test_bad_page_arrays_raise_before_the_mover(tcp_pair, bad, exc, match):
    p = tcp_pair
    refused_before_the_mover(p, exc, lambda: p.a.write_paged(p.src, p.imp, bad, GOOD, 64), match)
    refused_before_the_mover(p, exc, lambda: p.a.write_paged(p.src, p.imp, GOOD, bad, 64), match)


def test_page_arrays_of_different_lengths_raise(tcp_pair):
    p = tcp_pair
    refused_before_the_mover(p, ValueError, lambda: p.a.write_paged(
        p.src, p.imp, GOOD, np.arange(5, dtype=np.uint32), 64), "one destination page")


@pytest.mark.parametrize("kw, exc", [
    (dict(page_size=0), ValueError), (dict(page_size=-4), ValueError),
    (dict(page_size=4.0), TypeError), (dict(page_size=64, src_stride=-1), ValueError),
    (dict(page_size=64, dst_base="0"), TypeError), (dict(page_size=True), TypeError),
])
def test_bad_page_geometry_raises(tcp_pair, kw, exc):
    p = tcp_pair
    refused_before_the_mover(p, exc, lambda: p.a.write_paged(p.src, p.imp, GOOD, GOOD, **kw))


def test_handles_of_the_wrong_kind_raise_type_error(tcp_pair):
    p = tcp_pair
    for call in (lambda: p.a.write(p.src, 0, p.src, 0, 64),  # a Region as destination
                 lambda: p.a.write(p.imp, 0, p.imp, 0, 64),  # an Import as source
                 lambda: p.a.write_paged(p.src, p.peer, GOOD, GOOD, 64),
                 lambda: p.a.write_imm(p.src, 1),
                 lambda: p.a.writev(p.peer, p.imp, [(0, 0, 1)]),
                 lambda: p.a.write(p.src, 0, "1", 0, 64),
                 lambda: p.a.write(p.src, 0.0, p.imp, 0, 64),
                 lambda: p.a.unimport(p.peer), lambda: p.a.peer_remove(p.imp),
                 lambda: p.a.free(p.src.id)):
        refused_before_the_mover(p, TypeError, call)


def test_regions_of_another_client_or_freed_raise_value_error(tcp_pair):
    p = tcp_pair
    refused_before_the_mover(p, ValueError, lambda: p.a.write(p.dst, 0, p.imp, 0, 64),
                             "another Client")
    r = p.a.alloc(4096)
    r.free()
    refused_before_the_mover(p, ValueError, lambda: p.a.write(r, 0, p.imp, 0, 64), "freed")
    with pytest.raises(ValueError, match="another Client"):
        p.a.free(p.dst)


@pytest.mark.parametrize("args, exc, match", [
    ((0, 0, 0), ValueError, "0 bytes"),
    ((1 << 20, 0, 1), ValueError, "exceeds"),
    ((-1, 0, 1), ValueError, None),
    ((0, 0, 1 << 64), ValueError, None),
])
def test_bad_writes_raise(tcp_pair, args, exc, match):
    p = tcp_pair
    so, do, n = args
    refused_before_the_mover(p, exc, lambda: p.a.write(p.src, so, p.imp, do, n), match)
    refused_before_the_mover(p, ValueError, lambda: p.a.write_imm(p.imp, 1 << 32))


@pytest.mark.parametrize("segs, exc, match", [
    (np.zeros((3, 2), dtype=np.uint64), ValueError, "shape"),
    (np.zeros(3, dtype=np.uint64), ValueError, "shape"),
    ([(0, 0, 10), (10, 10, 0)], ValueError, "segment 1 has length 0"),
    ([(0, -1, 10)], ValueError, "negative"),
    ([(0.0, 1.0, 2.0)], TypeError, "integers"),
    ([(1 << 20, 0, 10)], ValueError, "segment 0: region"),
    ([], ValueError, "empty"),
])
def test_bad_segments_raise(tcp_pair, segs, exc, match):
    p = tcp_pair
    refused_before_the_mover(p, exc, lambda: p.a.writev(p.src, p.imp, segs), match)


def test_an_exception_inside_the_context_managers_frees_the_regions(start_mover):
    # A mover that lets a client hold two regions: a leak would show as
    # EDQUOT, in the mover's words.
    m = start_mover("tcp", 1, ("--quota-client-regions", "2"))
    with m.client() as c:
        for _ in range(3):
            with pytest.raises(RuntimeError):
                with c.alloc(4096) as r1, c.alloc(4096) as r2:
                    r1.numpy()[:] = 1
                    r2.numpy()[:] = 2
                    raise RuntimeError("the application failed")
            assert c.regions == []
        keep = [c.alloc(4096), c.alloc(4096)]
        with pytest.raises(mover.MoverError) as ei:
            c.alloc(4096)
        e = ei.value
        assert e.errno == errno.EDQUOT and e.call == "mvc_alloc"
        assert "quota" in e.message and "quota_client_regions" in e.message
        assert c.error == e.message
        assert len(c.regions) == 2 and all(not r.freed for r in keep)
    assert all(r.freed for r in keep)


def test_closing_the_client_frees_what_it_holds_at_the_mover(start_mover):
    m = start_mover("tcp", 1, ("--quota-uid-regions", "2"))
    c = m.client()
    c.alloc(4096), c.alloc(4096)
    c.close()
    with m.client() as c2:  # the same uid gets its two regions back
        c2.alloc(4096), c2.alloc(4096)


def test_a_mover_that_dies_fails_batches_in_flight_and_later_calls(start_mover):
    ma, mb = start_mover("tcp", 1), start_mover("tcp", 1)
    a, b = ma.client(), mb.client()
    try:
        src, dst = a.alloc(64 << 20), b.alloc(64 << 20)
        imp = a.import_region(a.peer_add(b.address()), dst.blob())
        cookies = []
        for _ in range(8):
            a.write(src, 0, imp, 0, 64 << 20)
            cookies.append(a.submit())
        ma.kill()
        seen, gone = [], None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                seen += a.wait(1)
            except mover.MoverError as e:
                gone = e
                break
        assert gone is not None and gone.errno == errno.EPIPE, seen
        failed = [e for e in seen if not e.ok]
        assert all(e.cause == mover.Cause.MOVER_GONE for e in failed)
        assert {e.cookie for e in seen} == set(cookies)  # each batch reported once
        with pytest.raises(mover.MoverError) as ei:
            a.alloc(4096)
        assert ei.value.errno == errno.EPIPE and "gone" in ei.value.message
        with pytest.raises(mover.MoverError):
            a.address()
    finally:
        a.close()  # frees what it can, disconnects whatever the mover's state
        b.close()
    assert a.closed and src.freed


def test_mover_error_carries_errno_cause_and_words():
    e = mover.MoverError(-errno.EAGAIN, "rings full", mover.Cause.NONE, "mvc_write")
    assert e.errno == errno.EAGAIN and isinstance(e, OSError)
    assert str(e) == "mvc_write: rings full [EAGAIN]"
    b = mover.MoverError(errno.EIO, "peer gone", mover.Cause.PEER_GONE, "batch")
    assert "PEER_GONE" in str(b)
    c = pickle.loads(pickle.dumps(b))
    assert (c.errno, c.message, c.cause, c.call) == (b.errno, b.message, b.cause, b.call)
    assert mover.MoverError(errno.EIO, "").message == "Input/output error"
    assert mover.Cause.of(99) == 99 and mover.Cause.of(4) is mover.Cause.BOUNDS


def test_bad_cookies_raise_and_leave_the_batch_open(tcp_pair):
    p = tcp_pair
    p.a.write(p.src, 0, p.imp, 0, 64)
    for bad, exc in ((-1, ValueError), (1 << 64, ValueError), ("7", TypeError),
                     (True, TypeError), (1.0, TypeError)):
        with pytest.raises(exc):
            p.a.submit(bad)
    ck = p.a.submit((1 << 64) - 1)
    assert p.a.wait_batch(ck, timeout=10).cookie == (1 << 64) - 1


def test_imm_expect_from_fails_when_the_senders_mover_stops(start_mover):
    """A receiver expecting immediates from a peer hears, within three
    heartbeats, that the peer's mover stopped (SIGSTOP), with the cause and
    the mover named; after SIGCONT the peer's immediates are expected again."""
    import signal

    hb = ("--heartbeat", "0.25")
    ma, mb = start_mover("tcp", 1, hb), start_mover("tcp", 1, hb)
    a, b = ma.client(), mb.client()
    try:
        dst = b.alloc(1 << 20)
        imp = a.import_region(a.peer_add(b.address()), dst.blob())
        sender = b.peer_add(a.address())
        with pytest.raises(mover.MoverError) as ei:
            b.imm_expect_from(sender.id + 1, 1, 1)
        assert ei.value.errno == errno.ENOENT
        with pytest.raises(TypeError):
            b.imm_expect_from(imp, 1, 1)
        with pytest.raises(ValueError):
            b.imm_expect_from(sender, 1, 0)
        b.imm_expect_from(sender, 77, 2, cookie=5)
        time.sleep(0.5)
        os.kill(ma.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        try:
            ev = b.wait_for(lambda e: e.type == mover.EventType.IMM_COUNT, timeout=5)
            dt = time.monotonic() - t0
        finally:
            os.kill(ma.pid, signal.SIGCONT)
        assert not ev.ok and ev.cookie == 5 and ev.cause == mover.Cause.PEER_DEAD
        assert ev.status == -errno.ETIMEDOUT and f"{a.info.mover_id:016x}" in ev.msg
        assert dt <= 0.75, f"told after {dt:.3f} s"
        b.wait(0.75)  # reads the news that the peer answers again
        b.imm_expect_from(sender, 78, 1, cookie=6)
        a.write_imm(imp, 78)
        a.wait_batch(a.submit(), timeout=10)
        ev = b.wait_for(lambda e: e.type == mover.EventType.IMM_COUNT, timeout=10)
        assert ev.ok and ev.cookie == 6
    finally:
        a.close()
        b.close()
