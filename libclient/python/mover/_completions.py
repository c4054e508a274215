# SPDX-License-Identifier: MIT
"""The part of mover.Client that reads completions: poll(), wait(),
wait_for(), wait_batch() and inflight, over libmvc's mvc_poll() and
mvc_wait(); and for event loops fileno(), arm() and wait_async(), over
mvc_event_fd() and mvc_arm(). A mixin: Client (mover.client) holds the
connection, the event array and the events wait_for() set aside."""
from __future__ import annotations

import asyncio
import errno
import math
import time
from collections import deque
from ctypes import Array
from typing import Callable

from . import _lib
from .errors import MoverError
from .events import Event, EventType
from .memory import _index

_lib_ = _lib.lib


class Completions:
    """Client's completion calls (see mover.Client). One thread at a time
    per Client, as in C; waits release the GIL."""

    # Client sets these, and has _h() (the connection, or ValueError when
    # closed), _fail() (a MoverError in libmvc's words) and _read_info().
    _ev: Array
    _held: deque[Event]
    _max_events: int
    _woken: asyncio.Future[None] | None = None  # what wakes a wait_async() asleep

    def _events(self, n: int, call: str) -> list[Event]:
        if n < 0:
            raise self._fail(n, call)
        ev = self._ev
        out = [Event._from_c(ev[i]) for i in range(n)]
        if any(e.type == EventType.MOVER_BACK for e in out):
            self._read_info()  # a new mover: its id, shards, this client's id
        return out

    def poll(self, max_events: int | None = None) -> list[Event]:
        """The events here now, without waiting (possibly none). MoverError
        EPIPE: the mover is gone (in-flight batches were reported failed with
        Cause.MOVER_GONE first); EPROTO: the mover cut this connection off."""
        c = self._h()
        m = self._take_max(max_events)
        if self._held:
            return [self._held.popleft() for _ in range(min(m, len(self._held)))]
        return self._events(_lib_.mvc_poll(c, self._ev, m), "mvc_poll")

    def wait(self, timeout: float | None = None, max_events: int | None = None) -> list[Event]:
        """Events, waiting up to timeout seconds (None: forever) for the
        first; an empty list when none came. The GIL is released while
        libmvc waits. Errors as poll()."""
        c = self._h()
        m = self._take_max(max_events)
        if self._held:
            return [self._held.popleft() for _ in range(min(m, len(self._held)))]
        return self._events(_lib_.mvc_wait(c, self._ev, m, _timeout_ms(timeout)), "mvc_wait")

    def fileno(self) -> int:
        """A file descriptor that becomes readable when there may be events
        (libmvc's mvc_event_fd()), for selectors and event loops; arm() it
        before each sleep. The library owns it: never read or close it; it
        stays the same for the client's life, reconnects included, and
        close() closes it."""
        c = self._h()
        fd = _lib_.mvc_event_fd(c)
        if fd < 0:
            raise self._fail(fd, "mvc_event_fd")
        return fd

    def arm(self) -> bool:
        """Readies fileno() for a sleep: True when there are events already
        (poll() now, then arm again), False when armed (sleep until it is
        readable, then poll() and arm again). A wake-up may find no event.
        MoverError EPIPE: the mover is gone and no reconnect will be tried;
        EPROTO: it cut this connection off (each once every batch in flight
        was reported)."""
        c = self._h()
        if self._held:
            return True
        r = _lib_.mvc_arm(c)
        if r < 0:
            raise self._fail(r, "mvc_arm")
        return r == 1

    async def wait_async(self, timeout: float | None = None,
                         max_events: int | None = None) -> list[Event]:
        """wait() for asyncio: the events, waiting up to timeout seconds
        (None: forever) for the first in the running event loop, which
        goes on with other tasks meanwhile (fileno() is one of its readers
        while this waits); an empty list when none came. Errors as wait():
        while the mover is away and a reconnect will be tried, it sleeps
        until each try and raises MoverError EPIPE only at its timeout, as
        wait() does. A close() meanwhile, from any task or thread, ends the
        wait with its ValueError. One waiter at a time per Client."""
        loop = asyncio.get_running_loop()
        left = None if timeout is None else _timeout_ms(timeout) / 1000
        deadline = None if left is None else loop.time() + left
        fd = self.fileno()
        while True:
            away = None
            try:
                evs = self.poll(max_events)
            except MoverError as e:
                if e.errno != errno.EPIPE:
                    raise
                # The mover is away: arm() raises too when no reconnect
                # will be tried, else sets the fd's timer for the next try.
                away, evs = e, []
            if evs:
                return evs
            if self.arm():
                continue
            if deadline is not None:
                left = deadline - loop.time()
                if left <= 0:
                    if away is not None:
                        raise away
                    return []
            woken = self._woken = loop.create_future()
            loop.add_reader(fd, _wake, woken)
            try:
                await asyncio.wait_for(woken, left)
            except asyncio.TimeoutError:
                return self.poll(max_events)
            finally:
                self._woken = None
                loop.remove_reader(fd)

    def _wake_async(self) -> None:
        """Wakes a wait_async() asleep, from any thread: close() calls it
        before the fd goes, and the waiter's poll() then raises."""
        w = self._woken
        if w is not None and not w.done():
            try:
                w.get_loop().call_soon_threadsafe(_wake, w)
            except RuntimeError:
                pass  # its loop is closed: nobody waits there any more

    def _take_max(self, max_events: int | None) -> int:
        if max_events is None:
            return self._max_events
        m = _index(max_events, "max_events", self._max_events)
        if m == 0:
            raise ValueError("max_events must be at least 1")
        return m

    def wait_for(self, match: Callable[[Event], bool], timeout: float | None = None) -> Event:
        """Waits for the first event match() accepts and returns it; other
        events that came meanwhile are kept for the next poll() or wait().
        TimeoutError after timeout seconds (None: forever)."""
        c = self._h()
        for i, e in enumerate(self._held):
            if match(e):
                del self._held[i]
                return e
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            evs = self._events(_lib_.mvc_wait(c, self._ev, self._max_events, _timeout_ms(left)),
                               "mvc_wait")
            for i, e in enumerate(evs):
                if match(e):
                    self._held.extend(evs[i + 1:])
                    return e
                self._held.append(e)
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"no matching event within {timeout} s")

    def wait_batch(self, cookie: int, timeout: float | None = None) -> Event:
        """Waits for the BATCH event of cookie; raises its MoverError if the
        batch failed, TimeoutError after timeout seconds."""
        cookie = _index(cookie, "cookie")
        ev = self.wait_for(lambda e: e.type == EventType.BATCH and e.cookie == cookie, timeout)
        return ev.raise_for_status()

    @property
    def inflight(self) -> int:
        """Batches submitted and not yet reported."""
        return _lib_.mvc_inflight(self._h())


def _timeout_ms(timeout: float | None) -> int:
    if timeout is None:
        return -1
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be seconds (a number) or None, not "
                        f"{type(timeout).__name__}")
    if timeout < 0 or math.isnan(timeout):
        raise ValueError(f"timeout is {timeout}; give seconds >= 0, or None for no limit")
    return min(int(math.ceil(timeout * 1000)), 0x7FFFFFFF)


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
