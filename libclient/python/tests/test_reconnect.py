# SPDX-License-Identifier: MIT
"""A mover restarted under a client of the binding: the batches in flight
fail once with Cause.MOVER_GONE, one EventType.MOVER_BACK event follows, and
the same Region and Import objects write again; reconnect=False stays gone."""
from __future__ import annotations

import errno
import time

import numpy as np
import pytest

import mover
from mover import Cause, EventType, MoverError


def events_until(c: mover.Client, done, timeout: float = 30.0) -> list:
    """Events (EPIPE while the mover is away is no event) until done(evs)."""
    evs: list = []
    end = time.monotonic() + timeout
    while not done(evs):
        assert time.monotonic() < end, f"timed out; events so far: {evs}"
        try:
            evs += c.wait(timeout=0.1)
        except MoverError as e:
            assert e.errno == errno.EPIPE, e
    return evs


@pytest.mark.parametrize("crash", [True, False], ids=["kill9", "sigterm"])
def test_restart_fails_inflight_once_then_ids_work_again(start_mover, crash):
    ma, mb = start_mover("tcp"), start_mover("tcp")
    a, b = ma.client(), mb.client()
    src, dst = a.alloc(1 << 20), b.alloc(1 << 20)
    imp = a.import_region(a.peer_add(b.address()), dst.blob())
    region_id, info = src.id, a.info
    src.numpy(np.uint8)[:] = np.arange(1 << 20, dtype=np.uint64).astype(np.uint8)
    cookies = []
    for k in range(8):
        a.write(src, k * 4096, imp, k * 4096, 4096)
        cookies.append(a.submit())
    ma.restart(crash=crash)
    evs = events_until(a, lambda e: any(x.type == EventType.MOVER_BACK for x in e))
    batches = [e for e in evs if e.type == EventType.BATCH]
    assert sorted(e.cookie for e in batches) == sorted(cookies)  # each exactly once
    assert all(e.ok or e.cause == Cause.MOVER_GONE for e in batches)
    back = [e for e in evs if e.type == EventType.MOVER_BACK]
    assert len(back) == 1 and back[0].ok and back[0].count == 3, back
    assert a.info.mover_id != info.mover_id
    # The same objects, the same ids: a write lands and is checked.
    assert src.id == region_id
    src.numpy(np.uint8)[:4096] = 0x5A
    a.write(src, 0, imp, 65536, 4096)
    a.write_imm(imp, 99)
    b.imm_expect(99, 1, cookie=5)
    a.wait_batch(a.submit(), timeout=20).raise_for_status()
    b.wait_for(lambda e: e.type == EventType.IMM_COUNT and e.imm == 99, timeout=20)
    assert (dst.numpy(np.uint8)[65536:65536 + 4096] == 0x5A).all()
    a.close()
    b.close()


def test_no_reconnect_stays_gone(start_mover):
    ma = start_mover("tcp")
    c = ma.client(reconnect=False)
    ma.restart()
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        try:
            assert all(e.type != EventType.MOVER_BACK for e in c.wait(timeout=0.1))
        except MoverError as e:
            assert e.errno == errno.EPIPE
    with pytest.raises(MoverError) as ei:
        c.poll()
    assert ei.value.errno == errno.EPIPE
    c.close()


@pytest.mark.parametrize("crash", [True, False], ids=["kill9", "sigterm"])
def test_receivers_restart_fails_its_expectations_once(start_mover, crash):
    """The receiver's own mover goes while it counts: each open expectation
    (imm_expect and imm_expect_from) ends once, with Cause.MOVER_GONE and the
    count that had arrived, before the MOVER_BACK event; none comes again."""
    ma, mb = start_mover("tcp"), start_mover("tcp")
    a, b = ma.client(), mb.client()
    src, dst = a.alloc(1 << 16), b.alloc(1 << 16)
    imp = a.import_region(a.peer_add(b.address()), dst.blob())
    sender = b.peer_add(a.address())
    b.imm_expect(77, 2, cookie=5)
    b.imm_expect_from(sender, 78, 1, cookie=6)
    a.write(src, 0, imp, 0, 4096)
    a.write_imm(imp, 77)
    a.wait_batch(a.submit(), timeout=20).raise_for_status()
    assert b.wait(timeout=0.3) == []  # the first of two is counted, not reported
    mb.restart(crash=crash)
    evs = events_until(b, lambda e: any(x.type == EventType.MOVER_BACK for x in e))
    back = next(i for i, e in enumerate(evs) if e.type == EventType.MOVER_BACK)
    counts = [e for e in evs if e.type == EventType.IMM_COUNT]
    assert sorted(e.cookie for e in counts) == [5, 6], evs
    assert all(not e.ok and e.cause == Cause.MOVER_GONE for e in counts), counts
    assert {e.cookie: e.count for e in counts} == {5: 1, 6: 0}
    assert all(evs.index(e) < back for e in counts)
    assert all(e.type != EventType.IMM_COUNT for e in b.wait(timeout=0.3))
    a.close()
    b.close()
