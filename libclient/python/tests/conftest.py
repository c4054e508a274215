# SPDX-License-Identifier: MIT
"""Fixtures the binding's tests share: real movers started from the build
tree (build/bin/mover, or $MV_BUILD/bin/mover), killed with the test process,
and pairs of clients on two movers with a region each and the receiver's
region imported by the sender. No mocks: every test talks to a mover."""
from __future__ import annotations

import ctypes
import glob
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(HERE.parent))  # the package from the source tree

import mover  # noqa: E402

BUILD = Path(os.environ.get("MV_BUILD", "build"))
if not BUILD.is_absolute():
    BUILD = ROOT / BUILD
MOVER_BIN = BUILD / "bin" / "mover"

_libc = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # A failed or killed test run must not leave movers behind.
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class MoverProc:
    """A mover process on its own socket; its log is kept when a test fails."""
    _seq = 0

    def __init__(self, provider: str = "tcp", shards: int = 2, extra: tuple[str, ...] = ()):
        if not MOVER_BIN.exists():
            pytest.fail(f"{MOVER_BIN} is not built: run make first")
        MoverProc._seq += 1
        tag = f"{os.getpid()}.{MoverProc._seq}"
        self.sock = f"/tmp/mvpy.{tag}.sock"
        self.log = f"/tmp/mvpy.{tag}.log"
        self.provider = provider
        argv = [str(MOVER_BIN), "--provider", provider, "--shards", str(shards),
                "--op-timeout", "3", "--socket", self.sock, *extra]
        if provider == "tcp":
            argv += ["--iface", "lo"]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                         preexec_fn=_die_with_parent)
        t0 = time.monotonic()
        while not os.path.exists(self.sock):
            if self.proc.poll() is not None:
                pytest.fail(f"mover exited at start ({self.proc.returncode}); see {self.log}:\n"
                            + Path(self.log).read_text())
            if time.monotonic() - t0 > 30:
                self.kill()
                pytest.fail(f"mover did not listen within 30 s; see {self.log}")
            time.sleep(0.02)

    def client(self, **kw) -> mover.Client:
        return mover.Client(self.sock, **kw)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._cleanup()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=6)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._cleanup()
        return self.proc.returncode

    def _cleanup(self) -> None:
        # A killed shm mover leaves its endpoint's segments and wake files.
        for pat in (f"/dev/shm/{self.proc.pid}:*", f"/dev/shm/mv.{self.proc.pid}.*"):
            for f in glob.glob(pat):
                try:
                    os.unlink(f)
                except OSError:
                    pass
        try:
            os.unlink(self.sock)
        except OSError:
            pass


@pytest.fixture
def start_mover():
    """start_mover(provider="tcp", shards=2, extra=()) -> MoverProc, stopped after the test."""
    procs: list[MoverProc] = []

    def start(provider: str = "tcp", shards: int = 2, extra: tuple[str, ...] = ()) -> MoverProc:
        m = MoverProc(provider, shards, extra)
        procs.append(m)
        return m

    yield start
    for m in procs:
        m.stop()
        os.path.exists(m.log) and os.unlink(m.log)


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
            m.stop()
            if not failed and os.path.exists(m.log):
                os.unlink(m.log)


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
