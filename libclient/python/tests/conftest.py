# SPDX-License-Identifier: MIT
"""Fixtures the binding's tests share: real movers started from the build
tree (build/bin/mover, or $MV_BUILD/bin/mover), killed with the test process,
and pairs of clients on two movers with a region each and the receiver's
region imported by the sender. No mocks: every test talks to a mover."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the package from the source tree

import mover  # noqa: E402
from mover.local import LocalMover  # noqa: E402


class MoverProc(LocalMover):
    """A mover of the build tree, 2 shards, a 3 s op timeout (a dead peer
    fails writes within the test); a failure to start fails the test."""

    def __init__(self, provider: str = "tcp", shards: int = 2, extra: tuple[str, ...] = ()):
        try:
            super().__init__(provider, shards, extra=("--op-timeout", "3", *extra))
        except (RuntimeError, FileNotFoundError) as e:
            pytest.fail(str(e))

    def client(self, **kw) -> mover.Client:
        return mover.Client(self.sock, **kw)


@pytest.fixture
def start_mover(request):
    """start_mover(provider="tcp", shards=2, extra=()) -> MoverProc, stopped
    after the test; their logs stay when it failed."""
    procs: list[MoverProc] = []
    failed_before = request.session.testsfailed

    def start(provider: str = "tcp", shards: int = 2, extra: tuple[str, ...] = ()) -> MoverProc:
        m = MoverProc(provider, shards, extra)
        procs.append(m)
        return m

    yield start
    failed = request.session.testsfailed > failed_before
    for m in procs:
        m.stop(keep_log=failed)
        if failed:
            print(f"mover log kept: {m.log}")


_movers: dict[str, tuple[MoverProc, MoverProc]] = {}


def movers_for(provider: str) -> tuple[MoverProc, MoverProc]:
    """Two movers of provider shared by the whole session (as two hosts)."""
    if provider not in _movers:
        _movers[provider] = (MoverProc(provider), MoverProc(provider))
    return _movers[provider]


@pytest.fixture(scope="session", autouse=True)
def _session_movers(request):
    """Stops the shared movers at the end; their logs stay when a test failed."""
    yield
    failed = request.session.testsfailed
    for a, b in _movers.values():
        for m in (a, b):
            m.stop(keep_log=bool(failed))


class Pair:
    """A sender a on mover A and a receiver b on mover B, with regions src
    (a's) and dst (b's), b's region imported by a as imp."""

    def __init__(self, ma: MoverProc, mb: MoverProc, srclen: int, dstlen: int, **kw):
        self.ma, self.mb = ma, mb
        self.a = ma.client(**kw)
        self.b = mb.client()
        self.src = self.a.alloc(srclen)
        self.dst = self.b.alloc(dstlen)
        self.peer = self.a.peer_add(self.b.address())
        self.imp = self.a.import_region(self.peer, self.dst.blob())

    def close(self) -> None:
        self.a.close()
        self.b.close()


@pytest.fixture(params=["tcp", "shm"])
def pair(request):
    """A Pair of 1 MiB regions on two movers, over tcp and over shm."""
    ma, mb = movers_for(request.param)
    p = Pair(ma, mb, 1 << 20, 1 << 20)
    yield p
    p.close()


@pytest.fixture
def tcp_pair():
    ma, mb = movers_for("tcp")
    p = Pair(ma, mb, 1 << 20, 1 << 20)
    yield p
    p.close()


@pytest.fixture
def client():
    """One client of the session's first tcp mover."""
    ma, _ = movers_for("tcp")
    c = ma.client()
    yield c
    c.close()
