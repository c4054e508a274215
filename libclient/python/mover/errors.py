# SPDX-License-Identifier: MIT
"""MoverError, the one exception the mover raises for what libmvc or the
mover refused, and Cause, why a batch failed (enum mvc_cause of mvc.h).

Bad arguments never become a MoverError: they raise TypeError or ValueError
before anything reaches libmvc. A closed Client raises ValueError, as a
closed file does.
"""
from __future__ import annotations

import enum
import errno as _errno
import os


class Cause(enum.IntEnum):
    """Why a batch failed (MVC_CAUSE_*)."""
    NONE = 0
    BAD_DESC = 1
    NO_REGION = 2
    NO_IMPORT = 3
    BOUNDS = 4
    PEER_GONE = 5
    PROVIDER = 6
    CANCELLED = 7
    MOVER_GONE = 8
    PROTOCOL = 9  # the connection was cut off: its rings broke the protocol
    PEER_DEAD = 10  # imm_expect_from: the peer's mover exited, hung or is unreachable
    PEER_BAD = 11  # imm_expect_from: the peer's mover sent garbage

    @classmethod
    def of(cls, value: int) -> Cause | int:
        """The Cause for value, or value itself when this binding does not know it."""
        try:
            return cls(value)
        except ValueError:
            return value


class MoverError(OSError):
    """A call libmvc or the mover refused, or a batch that failed.

    errno: the positive errno (EAGAIN: rings or list arena full right now,
    poll and call again; EPIPE: the mover is gone; EPROTO: the mover cut the
    connection off; EDQUOT: a quota). cause: a Cause for failed batches,
    Cause.NONE for refused calls. message: the words of libmvc or the mover.
    call: the libmvc function that failed, or "batch" for a batch's event.
    """

    def __init__(self, err: int, message: str, cause: Cause | int = Cause.NONE,
                 call: str = "") -> None:
        err = abs(err)
        if not message:
            message = os.strerror(err)
        super().__init__(err, message)
        self.cause = cause
        self.message = message
        self.call = call

    def __str__(self) -> str:
        name = _errno.errorcode.get(self.errno, str(self.errno))
        where = f"{self.call}: " if self.call else ""
        why = f" (cause {self.cause.name})" if isinstance(self.cause, Cause) and self.cause else ""
        return f"{where}{self.message} [{name}]{why}"

    def __reduce__(self):
        return (type(self), (self.errno, self.message, self.cause, self.call))
