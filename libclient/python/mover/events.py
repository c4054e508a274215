# SPDX-License-Identifier: MIT
"""Events (struct mvc_event as a small Python object), their types, and the
latency histogram of immediates (struct mvc_latency)."""
from __future__ import annotations

import enum
from typing import NamedTuple

from .errors import Cause, MoverError


class EventType(enum.IntEnum):
    BATCH = 1  # a submitted batch finished; status says how
    IMM = 2  # an immediate arrived in one of our regions
    IMM_COUNT = 3  # the count asked for with Client.imm_expect arrived
    MOVER_BACK = 4  # the mover came back and the client reconnected (see Client)


class Event:
    """One completion: a batch that finished, an immediate that arrived, a
    count of immediates that imm_expect asked for, or the mover that came
    back after it was gone (MOVER_BACK: count restored regions, peers and
    imports; a failure names the first that was not, by its id, in region).

    type: EventType; status: 0 or -errno; cookie: submit's (BATCH) or
    imm_expect's (IMM_COUNT); bytes: bytes the batch wrote; imm: the
    immediate's value; region: the region written (IMM) or at fault
    (errors); count: immediates counted (IMM_COUNT); cause: Cause; msg: the
    failure in words.
    """
    __slots__ = ("type", "status", "cookie", "bytes", "imm", "region", "count", "cause", "msg")

    def __init__(self, type: EventType | int, status: int = 0, cookie: int = 0, bytes: int = 0,
                 imm: int = 0, region: int = 0, count: int = 0, cause: Cause | int = Cause.NONE,
                 msg: str = "") -> None:
        self.type = type
        self.status = status
        self.cookie = cookie
        self.bytes = bytes
        self.imm = imm
        self.region = region
        self.count = count
        self.cause = cause
        self.msg = msg

    @classmethod
    def _from_c(cls, e) -> Event:
        t = e.type
        try:
            t = EventType(t)
        except ValueError:
            pass
        return cls(t, e.status, e.cookie, e.bytes, e.imm, e.region, e.count, Cause.of(e.cause),
                   e.msg.decode(errors="replace"))

    @property
    def ok(self) -> bool:
        """True unless the event reports a failure."""
        return self.status == 0

    def error(self) -> MoverError | None:
        """The failure as a MoverError (errno, cause, the mover's words), or None."""
        if self.status == 0:
            return None
        return MoverError(self.status, self.msg, self.cause, "batch")

    def raise_for_status(self) -> Event:
        """Raises error() when the event reports a failure; returns self otherwise."""
        err = self.error()
        if err is not None:
            raise err
        return self

    def __repr__(self) -> str:
        name = self.type.name if isinstance(self.type, EventType) else str(self.type)
        parts = [name]
        if self.type == EventType.BATCH:
            parts += [f"cookie={self.cookie}", f"bytes={self.bytes}"]
        elif self.type == EventType.IMM:
            parts += [f"imm={self.imm}", f"region={self.region}"]
        elif self.type == EventType.IMM_COUNT:
            parts += [f"imm={self.imm}", f"count={self.count}", f"cookie={self.cookie}"]
        elif self.type == EventType.MOVER_BACK:
            parts += [f"count={self.count}"]
        if self.status:
            cause = self.cause.name if isinstance(self.cause, Cause) else self.cause
            parts += [f"status={self.status}", f"cause={cause}", f"msg={self.msg!r}"]
        return f"Event({', '.join(parts)})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Event):
            return NotImplemented
        return all(getattr(self, k) == getattr(other, k) for k in self.__slots__)

    __hash__ = None  # mutable, compared by value


class Latency(NamedTuple):
    """How long immediates waited between the mover reading them and this
    client reading them: count, their sum in ns, and hist[i] counting waits
    below 2**(i + 7) ns (the last bucket also any longer)."""
    count: int
    sum_ns: int
    hist: tuple[int, ...]

    @property
    def mean_ns(self) -> float:
        return self.sum_ns / self.count if self.count else 0.0
