# SPDX-License-Identifier: MIT
"""Starting a mover daemon from Python, for tests, examples and benchmarks
on one host: LocalMover runs build/bin/mover (from the source tree, or
$MV_BUILD/bin/mover) or the `mover` on PATH on its own socket, waits until it
listens, and stops it (SIGTERM, then SIGKILL) on stop() or when the Python
process dies. A production mover is started by the operator, not by this."""
from __future__ import annotations

import ctypes
import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def mover_binary() -> str:
    """The mover this source tree built, else the one on PATH."""
    root = Path(__file__).resolve().parents[3]
    if (root / "libclient" / "mvc.h").exists():
        build = Path(os.environ.get("MV_BUILD", "build"))
        exe = (build if build.is_absolute() else root / build) / "bin" / "mover"
        if exe.exists():
            return str(exe)
    exe = shutil.which("mover")
    if exe is None:
        raise FileNotFoundError("no mover binary: build it (make) or install it (make install)")
    return exe


class LocalMover:
    """A mover process: provider "tcp" (on interface lo unless iface says
    otherwise) or "shm", shards shards, its socket in socket_dir, its output
    in log (a file beside the socket). Raises RuntimeError, with the log,
    when it exits or does not listen within timeout seconds."""
    _seq = 0

    def __init__(self, provider: str = "tcp", shards: int = 1, *, iface: str | None = None,
                 extra: tuple[str, ...] = (), socket_dir: str | None = None,
                 timeout: float = 30.0) -> None:
        LocalMover._seq += 1
        d = socket_dir or tempfile.gettempdir()
        tag = f"{os.getpid()}.{LocalMover._seq}"
        self.sock = os.path.join(d, f"mvpy.{tag}.sock")
        self.log = os.path.join(d, f"mvpy.{tag}.log")
        self.provider = provider
        # --no-config: the host's /etc/mover.conf is not this mover's.
        argv = [mover_binary(), "--no-config", "--provider", provider, "--shards", str(shards),
                "--socket", self.sock, *extra]
        if provider == "tcp":
            argv += ["--iface", iface or "lo"]
        self._argv = argv
        self._start(timeout)

    def _start(self, timeout: float) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self._argv, stdout=log, stderr=subprocess.STDOUT,
                                         preexec_fn=_die_with_parent)
        t0 = time.monotonic()
        while not os.path.exists(self.sock):
            if self.proc.poll() is not None:
                raise RuntimeError(f"mover exited at start ({self.proc.returncode}); its log "
                                   f"{self.log}:\n{Path(self.log).read_text()}")
            if time.monotonic() - t0 > timeout:
                self.kill()
                raise RuntimeError(f"mover did not listen within {timeout} s; see {self.log}")
            time.sleep(0.02)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._cleanup()

    def restart(self, crash: bool = True, timeout: float = 30.0) -> None:
        """Stops the mover, with SIGKILL (crash) or SIGTERM, and starts a
        new one on the same socket with the same options: what a client
        sees when its mover is restarted."""
        if crash:
            self.kill()
        else:
            self.stop(keep_log=True)
        self._start(timeout)

    def stop(self, keep_log: bool = False) -> int | None:
        """SIGTERM (the mover finishes what clients committed), SIGKILL
        after 6 s; returns its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=6)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._cleanup()
        if not keep_log and os.path.exists(self.log):
            os.unlink(self.log)
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

    def __enter__(self) -> LocalMover:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
