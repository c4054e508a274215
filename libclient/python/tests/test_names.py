# SPDX-License-Identifier: MIT
"""Named regions through a real etcd: Client.publish(), unpublish() and
lookup() between two movers of one cluster, a lookup that waits for its
name, the errors a caller can cause, and a mover in no cluster. Each test
module run starts Debian's etcd on a free loopback port and stops it;
skipped, with the reason, where etcd is not installed."""
from __future__ import annotations

import base64
import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request

import numpy as np
import pytest

import mover


# etcd on loopback, never through a proxy the environment names.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def etcd():
    exe = shutil.which("etcd")
    if exe is None:
        pytest.skip("no etcd here (Debian's etcd-server; tools/install-deps installs it)")
    d = tempfile.mkdtemp(prefix="mvpy-etcd.")
    cport, pport = _free_port(), _free_port()
    url = f"http://127.0.0.1:{cport}"
    argv = [exe, "--name", "mvpy", "--data-dir", d, "--listen-client-urls", url,
            "--advertise-client-urls", url, "--listen-peer-urls", f"http://127.0.0.1:{pport}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{pport}",
            "--initial-cluster", f"mvpy=http://127.0.0.1:{pport}"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.monotonic()
    while True:
        try:
            if b"true" in _OPENER.open(url + "/health", timeout=1).read():
                break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() - t0 > 20:
            proc.kill()
            pytest.fail("etcd did not start")
        time.sleep(0.1)
    yield f"127.0.0.1:{cport}"
    proc.terminate()
    proc.wait()
    shutil.rmtree(d, ignore_errors=True)


_cluster_seq = 0


@pytest.fixture
def cluster(etcd, start_mover):
    """Two movers of one fresh cluster."""
    global _cluster_seq
    _cluster_seq += 1
    name = f"py{os.getpid()}-{_cluster_seq}"
    extra = ("--etcd", etcd, "--cluster", name, "--etcd-ttl", "2")
    return start_mover("tcp", 1, extra), start_mover("tcp", 1, extra)


def test_lookup_imports_a_published_region_and_writes_land(cluster):
    ma, mb = cluster
    with mb.client() as b, b.alloc(1 << 16) as dst, ma.client() as a, a.alloc(1 << 16) as src:
        b.publish(dst, "kv/prefill-0")
        found = a.lookup("kv/prefill-0", timeout=5)
        assert found.nbytes == 1 << 16 and found.mover_id == b.info.mover_id
        data = np.random.default_rng(7).integers(0, 256, 1 << 16, dtype=np.uint8)
        src.numpy()[:] = data
        a.write(src, 0, found.dst, 0, 1 << 16)
        a.write_imm(found.dst, 9)
        a.wait_batch(a.submit(), timeout=10)
        b.wait_for(lambda e: e.type == mover.EventType.IMM, timeout=10)
        assert np.array_equal(dst.numpy(), data)
        # A second lookup of the same owner reuses this client's peer slot.
        again = a.lookup("kv/prefill-0")
        assert again.peer.id == found.peer.id and again.dst.id != found.dst.id


def test_lookup_waits_for_a_name_that_comes_later(cluster):
    ma, mb = cluster
    with mb.client() as b, b.alloc(4096) as r, ma.client() as a:
        t = threading.Timer(0.3, lambda: b.publish(r, "late"))
        t0 = time.monotonic()
        t.start()
        found = a.lookup("late", timeout=10)
        t.join()
        assert found.nbytes == 4096 and time.monotonic() - t0 >= 0.25


def test_a_missing_name_fails_at_once_or_at_its_timeout(cluster):
    ma, _ = cluster
    with ma.client() as a:
        with pytest.raises(mover.MoverError) as e:
            a.lookup("nobody")
        assert e.value.errno == errno.ENOENT and "nobody" in e.value.message
        t0 = time.monotonic()
        with pytest.raises(mover.MoverError) as e:
            a.lookup("nobody", timeout=0.4)
        assert e.value.errno == errno.ETIMEDOUT and time.monotonic() - t0 >= 0.35


def test_a_name_is_one_regions_and_goes_with_unpublish_and_with_its_client(cluster):
    ma, mb = cluster
    with ma.client() as a, a.alloc(4096) as r1, a.alloc(4096) as r2:
        a.publish(r1, "only-one")
        with pytest.raises(mover.MoverError) as e:
            a.publish(r2, "only-one")
        assert e.value.errno == errno.EEXIST
        with mb.client() as b, b.alloc(4096) as rb:
            with pytest.raises(mover.MoverError) as e:
                b.publish(rb, "only-one")
            assert e.value.errno == errno.EEXIST and "only-one" in e.value.message
            with pytest.raises(mover.MoverError) as e:
                b.unpublish("only-one")  # not b's to take back
            assert e.value.errno == errno.ENOENT
        a.unpublish("only-one")
        _gone(mb, "only-one")
        a.publish(r2, "with-client")
    _gone(mb, "with-client")


def _gone(m, name: str) -> None:
    with m.client() as c:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 5:
            try:
                c.lookup(name)
            except mover.MoverError as e:
                assert e.errno == errno.ENOENT
                return
            time.sleep(0.05)
        pytest.fail(f"{name} is still published")


def test_bad_names_are_refused_before_the_mover(cluster):
    ma, _ = cluster
    with ma.client() as a, a.alloc(4096) as r:
        with pytest.raises(ValueError):
            a.publish(r, "")
        with pytest.raises(ValueError):
            a.lookup("x" * 64)
        with pytest.raises(TypeError):
            a.lookup(b"bytes")  # type: ignore[arg-type]
        with pytest.raises(mover.MoverError) as e:
            a.publish(r, "has space")
        assert e.value.errno == errno.EINVAL and "byte 3" in e.value.message


def test_a_mover_in_no_cluster_says_how_to_join_one(start_mover):
    m = start_mover("tcp", 1)
    with m.client() as c, c.alloc(4096) as r:
        with pytest.raises(mover.MoverError) as e:
            c.publish(r, "x")
        assert e.value.errno == errno.ENOTCONN and "--etcd" in e.value.message
        with pytest.raises(mover.MoverError) as e:
            c.lookup("x", timeout=1)
        assert e.value.errno == errno.ENOTCONN


def _etcd(etcd: str, call: str, body: dict) -> dict:
    """One call of etcd's JSON gateway (/v3/kv/range, /v3/kv/deleterange)."""
    req = urllib.request.Request(f"http://{etcd}/v3/kv/{call}", data=json.dumps(body).encode())
    return json.loads(_OPENER.open(req, timeout=5).read() or b"{}")


def _member_key(mb, b) -> str:
    """mb's member key in its cluster (b a client of it), as etcd's gateway takes keys."""
    argv = mb._argv
    cl = argv[argv.index("--cluster") + 1]
    return base64.b64encode(f"/mover/{cl}/members/{b.info.mover_id:016x}".encode()).decode()


def test_an_expectation_from_a_member_that_left_fails_naming_the_departure(etcd, cluster):
    """A receiver expecting immediates from a member looked up by name is
    told when the member leaves the cluster (its key deleted here; a lease
    that expired is the same to the watch): the IMM_COUNT event fails with
    cause PEER_DEAD and a message naming the departure, long before any
    deadline. The member puts its key back, and is expected from again."""
    ma, mb = cluster
    with mb.client() as b, b.alloc(4096) as r, ma.client() as a:
        b.publish(r, "left")
        found = a.lookup("left", timeout=5)
        a.imm_expect_from(found.peer, 99, 1, cookie=7)
        t0 = time.monotonic()
        _etcd(etcd, "deleterange", {"key": _member_key(mb, b)})
        ev = a.wait_for(lambda e: e.type == mover.EventType.IMM_COUNT, timeout=5)
        dt = time.monotonic() - t0
        assert not ev.ok and ev.cookie == 7 and ev.cause == mover.Cause.PEER_DEAD, ev
        assert "left cluster" in ev.msg and f"{b.info.mover_id:016x}" in ev.msg, ev.msg
        assert dt < 2, f"told after {dt:.3f} s"


def test_a_member_gone_and_back_before_its_watcher_looks_still_fails_expectations(etcd, cluster):
    """The member's key is deleted and put back (the member does that itself
    at once) while the mover watching it is stopped: on waking it learns
    both together, and the departure still fails the expectation naming
    the member, as a departure the member is slow to return from does."""
    ma, mb = cluster
    with mb.client() as b, b.alloc(4096) as r, ma.client() as a:
        b.publish(r, "blink")
        found = a.lookup("blink", timeout=5)
        a.imm_expect_from(found.peer, 98, 1, cookie=8)
        key = _member_key(mb, b)
        os.kill(ma.pid, signal.SIGSTOP)
        try:
            _etcd(etcd, "deleterange", {"key": key})
            deadline = time.monotonic() + 5
            while not _etcd(etcd, "range", {"key": key}).get("kvs"):
                assert time.monotonic() < deadline, "the member did not put its key back"
                time.sleep(0.01)
        finally:
            os.kill(ma.pid, signal.SIGCONT)
        ev = a.wait_for(lambda e: e.type == mover.EventType.IMM_COUNT, timeout=5)
        assert not ev.ok and ev.cookie == 8 and ev.cause == mover.Cause.PEER_DEAD, ev
        assert "left cluster" in ev.msg and f"{b.info.mover_id:016x}" in ev.msg, ev.msg
