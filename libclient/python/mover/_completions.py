# SPDX-License-Identifier: MIT
"""The part of mover.Client that reads completions: poll(), wait(),
wait_for(), wait_batch() and inflight, over libmvc's mvc_poll() and
mvc_wait(). A mixin: Client (mover.client) holds the connection, the event
array and the events wait_for() set aside."""
from __future__ import annotations

import math
import time
from collections import deque
from ctypes import Array
from typing import Callable

from . import _lib
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
