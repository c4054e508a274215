# SPDX-License-Identifier: MIT
"""write_paged's fast path: page arrays libmvc can take as they are go to it
as they are, and it reads their headers (mvc_array_take, with the layout
mover._arrays.LAYOUT checked at import); every other array through numpy's checks
and conversion (page_array), and the geometry of the last call is reused
only for the very same immutable arguments. Each case is checked against
numpy's own view of the array, and by the bytes that land on the receiver."""
from __future__ import annotations

import errno
import sys

import numpy as np
import pytest

import mover
from mover import _arrays
from mover import client as client_module

from test_errors import refused_before_the_mover
from test_transfer import fill, land, recv_imm, small_arena_client

PAGE = 4096
NPAGES = 256  # the pair's 1 MiB regions


class Sub(np.ndarray):
    """A subclass: its own behaviour may differ, so it takes numpy's path."""


def read_only(v: np.ndarray) -> np.ndarray:
    a = v.astype(np.uint32)
    a.flags.writeable = False
    return a


# Page arrays of every kind holding the page numbers v (1-D int64).
KINDS = {
    "uint32": lambda v: v.astype(np.uint32),
    "uint32 slice at an offset": lambda v: np.concatenate([[7, 7, 7], v]).astype(np.uint32)[3:],
    "read-only uint32": read_only,
    "strided": lambda v: np.repeat(v, 2).astype(np.uint32)[::2],
    "reversed": lambda v: v[::-1].astype(np.uint32)[::-1],
    "column of a 2-D": lambda v: np.stack([v, v + 1], axis=1).astype(np.uint32)[:, 0],
    "big-endian uint32": lambda v: v.astype(">u4"),
    "int32": lambda v: v.astype(np.int32),
    "uint16": lambda v: v.astype(np.uint16),
    "uint64": lambda v: v.astype(np.uint64),
    "unaligned uint32": lambda v: np.frombuffer(b"\0" + v.astype(np.uint32).tobytes(),
                                                np.uint32, v.size, 1),
    "subclass": lambda v: v.astype(np.uint32).view(Sub),
}
# Shapes refused whatever the dtype.
REFUSED = {
    "2-D": lambda v: v.astype(np.uint32).reshape(2, -1),
    "2-D transposed": lambda v: v.astype(np.uint32).reshape(2, -1).T,
    "empty": lambda v: v[:0].astype(np.uint32),
    "0-d": lambda v: np.array(v[0], dtype=np.uint32),
}


def libmvc_takes(a: np.ndarray) -> bool:
    """numpy's word on a: a non-empty 1-D C-contiguous aligned native uint32 ndarray."""
    return (type(a) is np.ndarray and a.dtype == np.dtype("=u4") and a.dtype.isnative and
            a.ndim == 1 and a.flags.c_contiguous and a.flags.aligned and a.size > 0)


def test_the_fast_path_is_on_where_headers_can_be_read():
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    if sys.implementation.name != "cpython" or not gil:
        pytest.skip(f"{sys.implementation.name}, GIL {gil}: the headers are not read here")
    assert _arrays.LAYOUT is not None


@pytest.fixture
def checked(monkeypatch):
    """The arrays write_paged hands to page_array (numpy's path), recorded;
    page_array itself still does the work."""
    seen: list[object] = []

    def page_array(a, what):
        seen.append(a)
        return _arrays.page_array(a, what)

    monkeypatch.setattr(client_module, "page_array", page_array)
    return seen


@pytest.mark.parametrize("name", list(KINDS))
def test_only_what_libmvc_can_use_skips_numpy(tcp_pair, checked, name):
    p = tcp_pair
    a = KINDS[name](np.arange(64, dtype=np.int64))
    b = np.arange(64, dtype=np.uint32)
    fast = libmvc_takes(a) and _arrays.LAYOUT is not None
    assert fast == (name in ("uint32", "uint32 slice at an offset", "read-only uint32"))
    for sp, dp in ((a, b), (b, a)):
        checked.clear()
        p.a.write_paged(p.src, p.imp, sp, dp, 64)
        p.a.abort()
        assert (checked == []) == fast, name
        pages = p.a._pages  # what libmvc was handed
        assert pages.npages == 64
        if fast:
            assert (pages.src_pages, pages.dst_pages) == (sp.ctypes.data, dp.ctypes.data)


def test_unequal_lengths_and_other_sequences_take_numpys_path(tcp_pair, checked):
    p = tcp_pair
    a = np.arange(8, dtype=np.uint32)
    refused_before_the_mover(p, ValueError, lambda: p.a.write_paged(p.src, p.imp, a, a[:7], 64),
                             "one destination page")
    assert len(checked) == 2
    for other in (list(range(8)), memoryview(a), tuple(range(8))):
        checked.clear()
        p.a.write_paged(p.src, p.imp, a, other, 64)
        p.a.abort()
        assert len(checked) == 2


def test_every_kind_of_page_array_lands_its_pages(pair):
    """One batch of a write_paged per kind of array, each to its own
    destination pages (of every kind too), then every page compared on the
    receiver."""
    src = fill(pair, 11)
    s = src.reshape(NPAGES, PAGE)
    rng = np.random.default_rng(11)
    dst_order = rng.permutation(NPAGES)
    per = NPAGES // len(KINDS)
    kinds = list(KINDS.values())
    sent = []
    for i, kind in enumerate(kinds):
        sp = rng.integers(0, NPAGES, per)
        dp = dst_order[i * per:(i + 1) * per].astype(np.int64)
        pair.a.write_paged(pair.src, pair.imp, kind(sp), kinds[-1 - i](dp), PAGE)
        sent.append((sp, dp))
    land(pair, 11)
    d = pair.dst.numpy().reshape(NPAGES, PAGE)
    for sp, dp in sent:
        assert np.array_equal(d[dp], s[sp])


@pytest.mark.parametrize("name", list(REFUSED))
def test_refused_shapes_raise_value_error(tcp_pair, name):
    p = tcp_pair
    bad = REFUSED[name](np.arange(64, dtype=np.int64))
    good = np.arange(max(len(bad) if bad.ndim else 1, 1), dtype=np.uint32)
    refused_before_the_mover(p, ValueError, lambda: p.a.write_paged(p.src, p.imp, bad, good, 64))
    refused_before_the_mover(p, ValueError, lambda: p.a.write_paged(p.src, p.imp, good, bad, 64))


def test_the_geometry_follows_every_call(tcp_pair):
    """The same arrays with other geometry each call, in one batch: the
    reused geometry never outlives an argument that changed, even one that
    changed in place (a 0-d array given as page_size or base)."""
    p = tcp_pair
    src = fill(p, 12)
    sp = np.array([3, 1, 4, 1, 5], dtype=np.uint32)
    dp = np.arange(5, dtype=np.uint32)
    dp_next = dp + 10  # for the second call with the 0-d page_size: bytes 2500 on
    size = np.array(100, dtype=np.int64)
    base = np.array(6000, dtype=np.int64)
    # Destination bytes: [0, 320), [1000, 1320), [5000, 5576), [2000, 2500), [2500, 2750),
    # [6000, 6320), [7000, 7320).
    calls = [(dp, dict(page_size=64)), (dp, dict(page_size=64)),  # the second reuses
             (dp, dict(page_size=64, dst_base=1000)),
             (dp, dict(page_size=64, dst_base=5000, src_stride=4096, dst_stride=128)),
             (dp, dict(page_size=size, dst_base=2000)),
             (dp_next, dict(page_size=size, dst_base=2000)),
             (dp, dict(page_size=64, dst_base=base)), (dp, dict(page_size=64, dst_base=base))]
    want = []
    for i, (dpi, kw) in enumerate(calls):
        if i == 5:
            size[()] = 50  # the same objects as the call before, another page size
        if i == 7:
            base[()] = 7000  # the same objects as the call before, another base
        p.a.write_paged(p.src, p.imp, sp, dpi, **kw)
        ps = int(kw["page_size"])
        want.append((dpi, ps, int(kw.get("dst_base", 0)), kw.get("src_stride", ps),
                     kw.get("dst_stride", ps)))
    land(p, 12)
    d = p.dst.numpy()
    for dpi, ps, db, ss, ds in want:
        for s_, d_ in zip(sp, dpi):
            so, do = int(s_) * ss, db + int(d_) * ds
            assert np.array_equal(d[do:do + ps], src[so:so + ps]), (ps, db, ss, ds)
    assert not d[2750:5000].any()  # 50-byte pages after the change, not 100


def test_reused_geometry_still_refuses_what_changed(tcp_pair):
    p = tcp_pair
    a = np.arange(4, dtype=np.uint32)
    r = p.a.alloc(1 << 16)
    p.a.write_paged(r, p.imp, a, a, 1)
    p.a.abort()
    # The same objects as before but bool: refused as a bool always is.
    refused_before_the_mover(p, TypeError, lambda: p.a.write_paged(r, p.imp, a, a, True),
                             "integer")
    p.a.write_paged(r, p.imp, a, a, 1)
    p.a.abort()
    for kw in (dict(src_base=False), dict(dst_base=1.0), dict(src_base=-1)):
        refused_before_the_mover(p, TypeError if "-" not in repr(kw) else ValueError,
                                 lambda: p.a.write_paged(r, p.imp, a, a, 1, **kw))
    p.a.write_paged(r, p.imp, a, a, 64)
    p.a.abort()
    r.free()
    refused_before_the_mover(p, ValueError, lambda: p.a.write_paged(r, p.imp, a, a, 64),
                             "freed")
    p.a.close()
    with pytest.raises(ValueError, match="closed"):
        p.a.write_paged(p.src, p.imp, a, a, 64)


@pytest.fixture
def taken(monkeypatch):
    """What each one-call foreign call (mvc_write_paged_objs,
    mvc_submit_paged_objs) returned: 0 where libmvc took the arrays, 1
    where it left them to numpy's path."""
    seen: list[int] = []

    def recording(fn):
        def call(*args):
            ret = fn(*args)
            seen.append(ret)
            return ret
        return call

    for name in ("_write_paged_objs", "_submit_paged_objs"):
        monkeypatch.setattr(client_module, name, recording(getattr(client_module, name)))
    return seen


def test_the_same_arrays_again_send_what_they_hold_now(pair, taken, checked):
    """Once the geometry is known, a call with arrays libmvc takes makes no
    numpy check, and sends the pages they hold at that call."""
    src = fill(pair, 13)
    s = src.reshape(NPAGES, PAGE)
    sp = np.arange(8, dtype=np.uint32)
    dp = np.arange(8, dtype=np.uint32)
    pair.a.write_paged(pair.src, pair.imp, sp, dp, PAGE)
    assert taken == [0] and checked == []
    first = sp.copy()
    sp[:] = [200, 9, 8, 7, 6, 5, 4, 3]
    dp += 100
    pair.a.write_paged(pair.src, pair.imp, sp, dp, PAGE)
    assert taken == [0, 0] and checked == []
    land(pair, 13)
    d = pair.dst.numpy().reshape(NPAGES, PAGE)
    assert np.array_equal(d[:8], s[first])
    assert np.array_equal(d[100:108], s[sp])


def mutated(what, fn) -> None:
    """Runs an in-place change numpy may have deprecated or removed; skips
    the case where this numpy refuses it."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            fn()
        except (AttributeError, TypeError, ValueError) as e:
            pytest.skip(f"numpy {np.__version__} refuses {what} in place: {e}")


def test_an_in_place_change_of_the_same_arrays_is_seen(tcp_pair, taken):
    """The client keeps nothing of the arrays a call took: their length,
    shape or dtype changed in place after it is what the next call sees."""
    p = tcp_pair
    a = np.arange(64, dtype=np.uint32)
    b = a.copy()
    p.a.write_paged(p.src, p.imp, a, b, 64)
    p.a.abort()
    assert taken[-1] == 0
    a.resize(128, refcheck=False)  # nothing of the client's holds it
    refused_before_the_mover(p, ValueError, lambda: p.a.write_paged(p.src, p.imp, a, b, 64),
                             "one destination page")
    assert taken[-1] == 1
    a.resize(64, refcheck=False)
    mutated("a shape", lambda: setattr(a, "shape", (32, 2)))
    refused_before_the_mover(p, ValueError, lambda: p.a.write_paged(p.src, p.imp, a, b, 64),
                             "one-dimensional")
    a.shape = (64,)
    p.a.write_paged(p.src, p.imp, a, b, 64)
    p.a.abort()
    assert taken[-1] == 0
    mutated("a dtype", lambda: setattr(a, "dtype", np.float32))
    refused_before_the_mover(p, TypeError, lambda: p.a.write_paged(p.src, p.imp, a, b, 64),
                             "integers")
    assert taken[-1] == 1


def test_submit_paged_lands_every_kind_of_page_array(pair):
    """submit_paged: write_paged and submit in one call into libmvc. Arrays
    of every kind land their pages (those numpy converted are held until
    libmvc copied them), each batch after the immediate added before it,
    under the cookie given or a new one."""
    src = fill(pair, 13)
    s = src.reshape(NPAGES, PAGE)
    rng = np.random.default_rng(13)
    for i, (name, kind) in enumerate(KINDS.items()):
        sp = rng.integers(0, NPAGES, 16)
        dp = rng.permutation(NPAGES)[:16]
        pair.dst.numpy()[:] = 0
        pair.a.write_imm(pair.imp, 100 + i)
        want = None if i % 2 else 1000 + i
        ck = pair.a.submit_paged(pair.src, pair.imp, kind(sp), kind(dp), PAGE, cookie=want)
        assert want is None or ck == want
        pair.a.wait_batch(ck, timeout=10)
        recv_imm(pair, 100 + i)
        d = pair.dst.numpy().reshape(NPAGES, PAGE)
        assert np.array_equal(d[dp], s[sp]), name


def test_submit_paged_refused_submits_nothing(tcp_pair):
    """What write_paged refuses, submit_paged refuses before the mover; what
    libmvc refuses (a list larger than the arena) leaves no batch open."""
    p = tcp_pair
    a = np.arange(8, dtype=np.uint32)
    refused_before_the_mover(p, ValueError,
                             lambda: p.a.submit_paged(p.src, p.imp, a, a[:7], 64),
                             "one destination page")
    refused_before_the_mover(p, TypeError,
                             lambda: p.a.submit_paged(p.src, p.imp, a, a, 64, cookie=-1.5))
    with small_arena_client(p) as (c, r, imp, pages):
        with pytest.raises(mover.MoverError) as ei:
            c.submit_paged(r, imp, pages, pages, 16)
        assert ei.value.errno == errno.E2BIG and ei.value.call == "mvc_submit_paged"
        assert c.inflight == 0
        with pytest.raises(mover.MoverError, match="no open batch"):
            c.submit()


def test_submit_paged_again_checks_bases_and_cookie(pair):
    """submit_paged with the arrays and geometry of the call before (a layer
    loop's call, its own fast path in the binding): each layer's bases land
    where they say, a cookie of None takes the counter's next, and a base or
    cookie that is no uint64 is refused before the mover in the words of the
    first call's checks, as is a call on a closed client."""
    src = fill(pair, 14)
    s = src.reshape(NPAGES, PAGE)
    sp = np.array([5, 0, 9, 3], dtype=np.uint32)
    dp = np.array([1, 2, 3, 4], dtype=np.uint32)
    a = pair.a
    cks = []
    for layer in range(4):  # the same objects each time but the bases
        base = layer * 8 * PAGE
        cks.append(a.submit_paged(pair.src, pair.imp, sp, dp, PAGE, src_base=base,
                                  dst_base=base, cookie=None if layer % 2 else 500 + layer))
    assert cks[0] == 500 and cks[2] == 502 and cks[1] != cks[3]
    for ck in cks:
        a.wait_batch(ck, timeout=10)
    d = pair.dst.numpy().reshape(NPAGES, PAGE)
    for layer in range(4):
        assert np.array_equal(d[8 * layer + dp], s[8 * layer + sp]), layer
    for kw, exc, match in ((dict(src_base=-1), ValueError, "src_base is -1"),
                           (dict(dst_base=1 << 64), ValueError, "dst_base is"),
                           (dict(src_base=True), TypeError, "src_base must be an integer"),
                           (dict(dst_base=2.0), TypeError, "dst_base must be an integer"),
                           (dict(cookie=-1), ValueError, "cookie is -1"),
                           (dict(cookie=1 << 64), ValueError, "cookie is"),
                           (dict(cookie=False), TypeError, "cookie must be an integer")):
        a.submit_paged(pair.src, pair.imp, sp, dp, PAGE, cookie=600)  # the fast path's state
        a.wait_batch(600, timeout=10)
        refused_before_the_mover(pair, exc, lambda: a.submit_paged(pair.src, pair.imp, sp, dp,
                                                                   PAGE, **kw), match)
    a.close()
    with pytest.raises(ValueError, match="closed"):
        a.submit_paged(pair.src, pair.imp, sp, dp, PAGE, cookie=7)


def test_prepared_paged_write_sends_each_layer_at_its_base(pair):
    """Client.paged(): a paged write checked once, sent per layer with the
    layer's bases (write() into an open batch, submit() as one call); every
    kind of page array lands, the values read at each call (a uint32 array
    changed in place between calls sends its new pages)."""
    layers, lpages = 4, NPAGES // 4  # four layers of 64 pages in each 1 MiB region
    lbytes = lpages * PAGE
    src = fill(pair, 17).reshape(NPAGES, PAGE)
    rng = np.random.default_rng(17)
    for name, kind in KINDS.items():
        sp = rng.integers(0, lpages, 8)
        dp = rng.permutation(lpages)[:8]
        pair.dst.numpy()[:] = 0
        pw = pair.a.paged(pair.src, pair.imp, kind(sp), kind(dp), PAGE)
        assert pw.npages == 8
        for layer in range(layers - 1):
            pw.write(layer * lbytes, layer * lbytes)
        pair.a.wait_batch(pw.submit((layers - 1) * lbytes, (layers - 1) * lbytes, cookie=5),
                          timeout=10)
        d = pair.dst.numpy().reshape(NPAGES, PAGE)
        for layer in range(layers):
            o = layer * lpages
            assert np.array_equal(d[o + dp], src[o + sp]), (name, layer)
    # Values are read at each call: a native uint32 array is used as it is.
    sp = np.arange(8, dtype=np.uint32)
    dp = np.arange(8, dtype=np.uint32)
    pw = pair.a.paged(pair.src, pair.imp, sp, dp, PAGE)
    pair.dst.numpy()[:] = 0
    sp[:] = np.arange(100, 108)
    pair.a.wait_batch(pw.submit(), timeout=10)
    d = pair.dst.numpy().reshape(NPAGES, PAGE)
    assert np.array_equal(d[:8], src[100:108])
    with pytest.raises(ValueError):
        sp.resize(16)  # held by the PagedWrite: numpy refuses


def test_prepared_paged_write_refuses_what_changed_under_it(tcp_pair):
    """Bad arguments fail at paged(); bad bases, a freed source region, a
    removed import and a closed client fail at the call, before the mover,
    and what libmvc refuses is a MoverError naming the call."""
    p = tcp_pair
    a = np.arange(8, dtype=np.uint32)
    refused_before_the_mover(p, ValueError, lambda: p.a.paged(p.src, p.imp, a, a[:7], 64),
                             "one destination page")
    refused_before_the_mover(p, TypeError, lambda: p.a.paged(p.src, p.imp, a, a, 64.0))
    refused_before_the_mover(p, TypeError,
                             lambda: p.a.paged(p.imp, p.imp, a, a, 64), "source")
    pw = p.a.paged(p.src, p.imp, a, a, 64)
    refused_before_the_mover(p, ValueError, lambda: pw.submit(-1, 0), "src_base")
    refused_before_the_mover(p, TypeError, lambda: pw.write(0, "0"), "dst_base")
    refused_before_the_mover(p, TypeError, lambda: pw.submit(cookie=1.5), "cookie")
    # Past the region: the mover refuses the batch, in its words.
    with pytest.raises(mover.MoverError):
        p.a.wait_batch(pw.submit(1 << 20, 0), timeout=10)
    r = p.a.alloc(1 << 16)
    pr = p.a.paged(r, p.imp, a, a, 64)
    p.a.free(r)
    refused_before_the_mover(p, ValueError, lambda: pr.submit(), "was freed")
    imp = p.a.import_region(p.peer, p.dst.blob())
    pi = p.a.paged(p.src, imp, a, a, 64)
    p.a.unimport(imp)
    refused_before_the_mover(p, ValueError, lambda: pi.write(), "was removed")
    p.a.close()
    with pytest.raises(ValueError, match="closed"):
        pw.submit()
