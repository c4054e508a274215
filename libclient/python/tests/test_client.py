# SPDX-License-Identifier: MIT
"""The connection and memory calls: connect, info, close, alloc, views,
register_fd, register_cuda, free, blobs, peers and imports."""
from __future__ import annotations

import errno
import fcntl
import os
import re
from pathlib import Path

import numpy as np
import pytest

import mover
from conftest import movers_for


def test_connect_reports_the_movers_shards_and_provider(client):
    i = client.info
    assert i.nshards == 2
    assert i.provider.startswith("tcp")
    assert i.max_batches > 0 and i.mover_id != 0
    assert not client.closed
    assert "shards=2" in repr(client)


def test_the_library_says_its_path_and_version():
    # The version the header of this tree declares, read from mvc.h.
    h = (Path(__file__).resolve().parents[2] / "mvc.h").read_text()
    want = ".".join(re.search(rf"#define MVC_VERSION_{k} (\d+)", h).group(1)
                    for k in ("MAJOR", "MINOR", "PATCH"))
    assert mover.library_version() == want
    assert os.path.exists(mover.library_path())


def test_connect_to_a_missing_socket_names_the_path(tmp_path):
    path = str(tmp_path / "nobody.sock")
    with pytest.raises(mover.MoverError) as ei:
        mover.Client(path)
    assert ei.value.errno == errno.ENOENT
    assert path in ei.value.message
    assert ei.value.call == "mvc_connect"


def test_socket_from_environment(monkeypatch):
    ma, _ = movers_for("tcp")
    monkeypatch.setenv("MOVER_SOCKET", ma.sock)
    with mover.Client() as c:
        assert c.info.nshards == 2


def test_context_manager_closes_and_close_twice_is_a_noop():
    ma, _ = movers_for("tcp")
    with ma.client() as c:
        r = c.alloc(4096)
    assert c.closed and r.freed
    c.close()
    assert repr(c) == "Client(closed)"


def test_every_call_on_a_closed_client_raises_value_error(client):
    r = client.alloc(4096)
    client.close()
    pages = np.zeros(1, dtype=np.uint32)
    calls = [
        lambda: client.alloc(4096), lambda: client.register_fd(0, 0, 4096),
        lambda: client.register_cuda(1, 4096), lambda: client.address(),
        lambda: client.region_blob(r.id), lambda: client.peer_add(b"x"),
        lambda: client.peer_remove(0), lambda: client.import_region(0, b"x"),
        lambda: client.unimport(0), lambda: client.write(r.id, 0, 0, 0, 1),
        lambda: client.writev(r.id, 0, [(0, 0, 1)]),
        lambda: client.write_paged(r.id, 0, pages, pages, 4096),
        lambda: client.write_imm(0, 1), lambda: client.submit(), lambda: client.abort(),
        lambda: client.poll(), lambda: client.wait(0), lambda: client.imm_expect(1, 1),
        lambda: client.latency(), lambda: client.shard_bytes(0), lambda: client.shard_descs(0),
        lambda: client.inflight, lambda: client.error, lambda: client.wait_batch(1, 0),
        lambda: r.numpy(), lambda: r.blob(),
    ]
    for call in calls:
        with pytest.raises(ValueError, match="closed|freed"):
            call()


def test_alloc_views_share_the_regions_memory(client):
    with client.alloc(1 << 16) as r:
        assert r.nbytes == 1 << 16 and r.addr != 0 and r.fd >= 0 and not r.is_gpu
        assert r.path == mover.GpuPath.HOST
        mv = r.memory
        assert mv.nbytes == 1 << 16 and not mv.readonly
        a = r.numpy(np.uint32)
        a[:] = np.arange(a.size, dtype=np.uint32)
        assert bytes(mv[4:8]) == (1).to_bytes(4, "little")
        mv[-1] = 0xAB
        assert a[-1] >> 24 == 0xAB
        # The memfd libmvc registered holds the same bytes.
        assert os.pread(r.fd, 1, (1 << 16) - 1) == b"\xab"
        del mv, a


def test_alloc_says_what_backs_a_region(client):
    with client.alloc(4 << 20, hugepages="never") as r:
        i = r.info()
        assert i["backing"] == "4k" and i["page_size"] == 4096
        assert "asked for 4 KiB pages" in i["why"]
        assert i["alloc_ns"] > 0 and i["map_ns"] > 0
        r.memory[-1] = 7
    with pytest.raises(ValueError, match="hugepages must be one of"):
        client.alloc(4096, hugepages="sometimes")


def test_torch_views_share_the_regions_memory(client):
    torch = pytest.importorskip("torch")
    with client.alloc(1 << 16) as r:
        r.numpy(np.uint32)[:] = np.arange(1 << 14, dtype=np.uint32)
        t = r.torch(shape=(16, 4096))
        assert t.dtype == torch.uint8 and int(t[0, 4]) == 1
        t[15, 4095] = 0xAB
        assert r.memory[-1] == 0xAB
        del t


def test_numpy_and_torch_views_take_dtype_shape_and_offset(client):
    torch = pytest.importorskip("torch")

    with client.alloc(4096 * 4) as r:
        a = r.numpy(np.float16, shape=(2, 8, 64), offset=4096)
        assert a.shape == (2, 8, 64) and a.dtype == np.float16
        a[1, 7, 63] = 1.5
        t = r.torch(torch.float16, shape=(2, 8, 64), offset=4096)
        assert float(t[1, 7, 63]) == 1.5
        assert r.torch(torch.bfloat16).numel() == 4096 * 2
        with pytest.raises(ValueError, match="needs"):
            r.numpy(shape=(4096 * 4 + 1,))
        with pytest.raises(ValueError, match="past"):
            r.numpy(offset=4096 * 5)
        with pytest.raises(ValueError, match="whole number"):
            r.numpy(np.uint64, offset=3)
        with pytest.raises(TypeError, match="torch.dtype"):
            r.torch(np.float32)
        with pytest.raises(TypeError):
            r.numpy(shape=(2.5,))
        del a, t


def test_a_view_kept_past_free_stays_readable(client):
    r = client.alloc(1 << 20)
    a = r.numpy()
    a[:] = 9
    r.free()
    assert r.freed and r not in client.regions
    # The pages live as long as a mapping does: no use-after-unmap.
    assert int(a.sum()) == 9 << 20
    a[:] = 1
    r.free()  # twice: a no-op
    with pytest.raises(ValueError, match="freed"):
        r.memory


def test_alloc_refuses_bad_sizes_before_the_mover(client):
    with pytest.raises(ValueError):
        client.alloc(0)
    with pytest.raises(ValueError):
        client.alloc(-1)
    with pytest.raises(TypeError):
        client.alloc("4096")
    with pytest.raises(TypeError):
        client.alloc(4096.0)


def test_alloc_past_memory_raises_mover_error(client):
    with pytest.raises(mover.MoverError) as ei:
        client.alloc(1 << 60)
    assert ei.value.errno != 0 and ei.value.message
    assert ei.value.call == "mvc_alloc"
    assert client.regions == []


def test_register_fd_shares_a_sealed_memfd_from_its_offset(client):
    fd = os.memfd_create("pytest", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, 3 * 4096)
        with pytest.raises(mover.MoverError) as ei:
            client.register_fd(fd, 0, 4096)
        assert ei.value.errno == errno.EPERM and "F_SEAL_SHRINK" in ei.value.message
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
        with client.register_fd(fd, 4096 + 16, 8000) as r:
            assert r.nbytes == 8000
            r.numpy()[:4] = [1, 2, 3, 4]
            assert os.pread(fd, 4, 4096 + 16) == b"\x01\x02\x03\x04"
            assert r.memory[:4].tobytes() == b"\x01\x02\x03\x04"
            assert r.fd != fd
        with pytest.raises(mover.MoverError) as ei:
            client.register_fd(fd, 0, 1 << 20)  # past the file's end
        assert ei.value.call == "mvc_register_fd" and ei.value.message
    finally:
        os.close(fd)
    with pytest.raises(ValueError):
        client.register_fd(-1, 0, 4096)
    with pytest.raises(ValueError):
        client.register_fd(0, 0, 0)


def test_register_cuda_without_cuda_says_why(client):
    # Only a host where libmvc finds no CUDA takes this path; with a GPU the
    # pointer below is not device memory, which is an error too.
    with pytest.raises(mover.MoverError) as ei:
        client.register_cuda(0x10000, 4096)
    assert ei.value.errno in (errno.ENOTSUP, errno.EINVAL)
    assert "CUDA" in ei.value.message or "not CUDA device memory" in ei.value.message
    assert client.regions == []
    with pytest.raises(ValueError):
        client.register_cuda(0, 4096)
    with pytest.raises(TypeError, match="nbytes"):
        client.register_cuda(0x10000)


def test_register_cuda_refuses_a_cpu_tensor(client):
    torch = pytest.importorskip("torch")

    with pytest.raises(TypeError, match="CUDA memory"):
        client.register_cuda(torch.zeros(16))


def test_blobs_are_bytes_and_unknown_regions_are_refused(client):
    addr = client.address()
    assert isinstance(addr, bytes) and 0 < len(addr) <= mover.BLOB_MAX
    with client.alloc(4096) as r:
        blob = r.blob()
        assert isinstance(blob, bytes) and len(blob) > 0
        assert client.region_blob(r.id) == blob
    with pytest.raises(mover.MoverError) as ei:
        client.region_blob(r.id)  # freed
    assert ei.value.errno == errno.ENOENT and ei.value.message


def test_peers_and_imports_come_and_go(tcp_pair):
    p = tcp_pair
    assert isinstance(p.peer, mover.Peer) and isinstance(p.imp, mover.Import)
    assert p.imp.peer == p.peer.id
    second = p.a.import_region(p.peer, p.dst.blob())
    assert second.id != p.imp.id
    second.unimport()
    assert second.removed
    with pytest.raises(mover.MoverError) as ei:
        p.a.unimport(second.id)
    assert ei.value.errno == errno.ENOENT
    p.peer.remove()
    assert p.peer.removed
    with pytest.raises(mover.MoverError):
        p.a.peer_remove(p.peer.id)
    with pytest.raises(mover.MoverError) as ei:
        p.a.import_region(p.peer.id, p.dst.blob())
    assert ei.value.message


def test_peer_add_refuses_garbage_with_the_movers_words(client):
    with pytest.raises(mover.MoverError) as ei:
        client.peer_add(b"\0" * 64)
    assert ei.value.call == "mvc_peer_add" and ei.value.message
    with pytest.raises(TypeError):
        client.peer_add("not bytes")
    with pytest.raises(ValueError):
        client.peer_add(b"")


def test_import_refuses_a_forged_blob(tcp_pair):
    blob = bytearray(tcp_pair.dst.blob())
    blob[-1] ^= 0xFF
    blob[len(blob) // 2] ^= 0xFF
    with pytest.raises(mover.MoverError) as ei:
        tcp_pair.a.import_region(tcp_pair.peer, bytes(blob[:8]))
    assert ei.value.message
    with pytest.raises(TypeError):
        tcp_pair.a.import_region(tcp_pair.imp, bytes(blob))


def test_latency_shard_counters_and_inflight_start_at_zero(client):
    lat = client.latency()
    assert lat.count == 0 and lat.sum_ns == 0 and len(lat.hist) == 32 and lat.mean_ns == 0.0
    assert client.shard_bytes(0) == 0 and client.shard_descs(1) == 0
    assert client.inflight == 0
    with pytest.raises(ValueError, match="2 shards"):
        client.shard_bytes(2)
    assert isinstance(client.error, str)
