# SPDX-License-Identifier: MIT
"""Waiting in the application's event loop, over tcp and over shm:
Client.fileno() and arm() with selectors (readable when a completion comes
and not before; arm() finds events not yet polled), and wait_async() under
asyncio, whose loop goes on with other tasks while a batch is in flight."""
from __future__ import annotations

import asyncio
import selectors
import time

import pytest

import mover


def test_fileno_wakes_a_selector_and_arm_finds_what_is_not_polled(pair):
    p = pair
    fd = p.a.fileno()
    assert fd >= 0 and p.a.fileno() == fd
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        assert p.a.arm() is False
        assert sel.select(0.05) == []
        p.a.write(p.src, 0, p.imp, 0, 4096)
        ck = p.a.submit()
        assert sel.select(10), "the completion did not wake the fd"
        assert p.a.arm() is True  # there, not polled yet
        (ev,) = p.a.poll()
        assert ev.type == mover.EventType.BATCH and ev.cookie == ck and ev.ok
        assert p.a.arm() is False
        assert sel.select(0.05) == [], "what woke the fd was not taken"


def test_wait_async_lets_the_loop_run_other_tasks(pair):
    p = pair

    async def main() -> tuple[list[mover.Event], int, float]:
        ticks, stop = 0, False

        async def ticker() -> None:
            nonlocal ticks
            while not stop:
                ticks += 1
                await asyncio.sleep(0.005)

        def send() -> None:
            p.a.write(p.src, 0, p.imp, 0, 1 << 20)
            p.a.submit(77)

        task = asyncio.create_task(ticker())
        asyncio.get_running_loop().call_later(0.1, send)
        t0 = time.monotonic()
        evs = await p.a.wait_async(timeout=10)
        took = time.monotonic() - t0
        stop = True
        await task
        return evs, ticks, took

    evs, ticks, took = asyncio.run(main())
    assert [(e.type, e.cookie, e.ok) for e in evs] == [(mover.EventType.BATCH, 77, True)]
    # A wait that held the loop would have let the ticker run once.
    assert took >= 0.09 and ticks >= 3, (took, ticks)


def test_wait_async_times_out_with_no_events(tcp_pair):
    a = tcp_pair.a
    t0 = time.monotonic()
    assert asyncio.run(a.wait_async(timeout=0.1)) == []
    assert time.monotonic() - t0 >= 0.09
    with pytest.raises(ValueError):
        asyncio.run(a.wait_async(timeout=-1))


def test_event_loop_calls_on_a_closed_client_raise(client):
    client.fileno()
    client.close()
    for call in (client.fileno, client.arm):
        with pytest.raises(ValueError):
            call()
    with pytest.raises(ValueError):
        asyncio.run(client.wait_async(0.01))


def test_close_ends_a_wait_async_that_would_wait_forever(start_mover):
    m = start_mover("tcp", 1)
    c = m.client()

    async def main() -> float:
        async def closer() -> None:
            await asyncio.sleep(0.05)
            c.close()

        task = asyncio.create_task(closer())
        t0 = time.monotonic()
        with pytest.raises(ValueError):  # not a TimeoutError: close() woke it
            await asyncio.wait_for(c.wait_async(), 5)
        await task
        return time.monotonic() - t0

    assert asyncio.run(main()) < 5


def test_one_waiter_task_serves_many_sending_tasks(pair):
    """The README's pattern: a task per request submits and awaits its own
    future; one task waits on the client and resolves them by cookie."""
    p = pair

    async def main() -> list[mover.Event]:
        pending: dict[int, asyncio.Future[mover.Event]] = {}

        async def completions() -> None:
            while True:
                for ev in await p.a.wait_async():
                    if ev.type == mover.EventType.BATCH and ev.cookie in pending:
                        pending.pop(ev.cookie).set_result(ev)

        async def send(i: int) -> mover.Event:
            await asyncio.sleep(0.001 * (i % 5))
            p.a.write(p.src, i * 4096, p.imp, i * 4096, 4096)
            done = pending[p.a.submit()] = asyncio.get_running_loop().create_future()
            return (await done).raise_for_status()

        waiter = asyncio.create_task(completions())
        evs = await asyncio.wait_for(asyncio.gather(*(send(i) for i in range(32))), 20)
        waiter.cancel()
        return evs

    evs = asyncio.run(main())
    assert len(evs) == 32 and len({e.cookie for e in evs}) == 32
    assert all(e.ok and e.bytes == 4096 for e in evs)


def test_wait_async_sleeps_through_a_mover_restart(start_mover):
    """The mover killed (-9) and started again on its socket while a
    wait_async() with no timeout sleeps: the batches in flight fail once
    with Cause.MOVER_GONE, then one MOVER_BACK comes, all through the event
    loop, with no EPIPE raised in between (wait() sleeps through it too)."""
    ma, mb = start_mover("tcp"), start_mover("tcp")
    a, b = ma.client(), mb.client()
    src, dst = a.alloc(1 << 20), b.alloc(1 << 20)
    imp = a.import_region(a.peer_add(b.address()), dst.blob())
    cookies = []
    for k in range(8):
        a.write(src, k * 4096, imp, k * 4096, 4096)
        cookies.append(a.submit())

    async def main() -> list[mover.Event]:
        restart = asyncio.get_running_loop().run_in_executor(None, ma.restart)
        evs: list[mover.Event] = []
        while not any(e.type == mover.EventType.MOVER_BACK for e in evs):
            evs += await asyncio.wait_for(a.wait_async(), 30)
        await restart
        return evs

    evs = asyncio.run(main())
    batches = [e for e in evs if e.type == mover.EventType.BATCH]
    assert sorted(e.cookie for e in batches) == sorted(cookies)  # each exactly once
    assert all(e.ok or e.cause == mover.Cause.MOVER_GONE for e in batches)
    assert [e.type for e in evs].count(mover.EventType.MOVER_BACK) == 1
    a.close()
    b.close()
