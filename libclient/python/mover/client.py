# SPDX-License-Identifier: MIT
"""Client: one connection to the local mover (struct mvc), covering mvc.h:
memory (alloc, register_fd, register_cuda), building and submitting batches
(write, writev, write_paged, submit_paged, write_imm, submit, abort),
imm_expect, imm_expect_from and latency here; blobs, peers, imports and
named regions in an etcd cluster from mover._peers, and completions (poll,
wait; in an event loop fileno, arm and wait_async) from mover._completions.

Every argument is checked before libmvc sees it: TypeError for a wrong type
or dtype, ValueError for a wrong value, shape or length, ValueError on a
closed client. What libmvc or the mover refuses raises MoverError with the
errno and their words. Concurrency, as in C: one thread at a time per
Client (calls that wait release the GIL); open one Client per thread for
parallel submitters.
"""
from __future__ import annotations

import itertools
import os
import struct
from collections import deque
from ctypes import byref, c_uint64, c_void_p
from typing import Any, NamedTuple

from . import _lib
from ._completions import Completions
from ._peers import Import, Peer, Peers, _u32
from ._arrays import LAYOUT as _LAYOUT
from ._arrays import address as _address
from ._arrays import page_array, segment_array
from .errors import MoverError
from .events import Event, Latency
from .memory import Region, _index
from .paged import PagedWrite

U32_MAX = 0xFFFFFFFF
U64_MAX = (1 << 64) - 1
_lib_ = _lib.lib
# Called with ctypes objects only (mover._lib.raw): the connection's c_void_p,
# byref()s and a c_uint64.
_write_paged = _lib.raw.mvc_write_paged
_submit = _lib.raw.mvc_submit
_submit_paged = _lib.raw.mvc_submit_paged
_write_paged_objs = _lib.held.mvc_write_paged_objs  # with the GIL: they read the arrays
_submit_paged_objs = _lib.held.mvc_submit_paged_objs
_LAYOUT_REF = None if _LAYOUT is None else byref(_LAYOUT)
# struct mvc_paged_objs in one store: the two page arrays (their id(), which
# libmvc reads while the call holds them), the bases and the cookie; it
# refuses what a uint64_t cannot hold (struct.error).
_pack_objs = struct.Struct("=QQQQQ").pack_into
assert [f[0] for f in _lib.mvc_paged_objs._fields_] == ["src_pages", "dst_pages", "src_base",
                                                        "dst_base", "cookie"]
_NO_ARG = object()  # is no argument
_NO_ARGS = (_NO_ARG,) * 5
_INT_OR_NONE = (int, type(None))


class Info(NamedTuple):
    """What the mover said at connect (struct mvc_info)."""
    client_id: int
    nshards: int
    max_batches: int  # batches this client may have in flight
    mover_id: int
    provider: str


_SRC_TYPES = (Region, int)  # write_paged arguments the geometry cache may keep
_DST_TYPES = (Import, int)


class Client(Completions, Peers):
    """A connection to the local mover.

    socket: the mover's socket path; None: $MOVER_SOCKET, else the mover's
    default path. list_arena: bytes of the list arena (0: $MVC_LIST_ARENA,
    else 64 MiB). max_events: the most events one poll() or wait() returns.
    reconnect: when the mover goes, its batches in flight fail once with
    Cause.MOVER_GONE and poll() and wait() raise MoverError EPIPE; then
    libmvc reconnects to the same socket on later calls, keeping region,
    peer and import ids, and reports it with one EventType.MOVER_BACK event
    (False: stay gone, as before). See mvc_connect(3).
    Raises MoverError when the mover cannot be reached or refuses.

        with mover.Client() as c, c.alloc(1 << 20) as r:
            r.numpy()[:] = 7
    """

    def __init__(self, socket: str | os.PathLike | None = None, *, list_arena: int = 0,
                 max_events: int = 64, reconnect: bool = True) -> None:
        self._c: c_void_p | None = None
        path = None if socket is None else os.fsencode(socket)
        opts = _lib.mvc_opts(list_arena=_index(list_arena, "list_arena"),
                             flags=0 if reconnect else _lib.OPT_NO_RECONNECT)
        max_events = _index(max_events, "max_events", 1 << 20)
        if max_events == 0:
            raise ValueError("max_events must be at least 1")
        c = c_void_p()
        ret = _lib_.mvc_connect_opts(byref(c), path, byref(opts))
        if ret < 0:
            raise MoverError(-ret, (_lib_.mvc_connect_error() or b"").decode(errors="replace"),
                             call="mvc_connect")
        self._c = c
        self._regions: dict[int, Region] = {}
        self._ev = (_lib.mvc_event * max_events)()
        self._max_events = max_events
        self._pages = _lib.mvc_pages()
        self._pages_ref = byref(self._pages)
        self._objs = _lib.mvc_paged_objs()  # the paged calls' arrays, bases and cookie
        self._objs_ref = byref(self._objs)
        self._cookie = c_uint64()  # submit()'s argument
        # What self._pages holds, as write_paged was given it: (src, dst,
        # page_size, src_stride, dst_stride); the bases are stored each call.
        self._paged_args: tuple[Any, ...] = _NO_ARGS
        self._keep: Any = None  # converted page arrays of the last paged call (_paged)
        self._held: deque[Event] = deque()  # events wait_for() set aside
        self._cookies = itertools.count(1)
        self._read_info()

    def _read_info(self) -> None:
        inf = _lib.mvc_info()
        _lib_.mvc_info(self._c, byref(inf))
        self.info = Info(inf.client_id, inf.nshards, inf.max_batches, inf.mover_id,
                         inf.provider.decode(errors="replace"))

    # -- the connection ------------------------------------------------------

    def _h(self) -> c_void_p:
        c = self._c
        if c is None:
            raise ValueError("the client is closed")
        return c

    def _fail(self, ret: int, call: str) -> MoverError:
        msg = _lib_.mvc_error(self._c) if self._c is not None else b""
        return MoverError(-ret, (msg or b"").decode(errors="replace"), call=call)

    @property
    def closed(self) -> bool:
        return self._c is None

    @property
    def error(self) -> str:
        """The last failure of this connection in words (mvc_error)."""
        return (_lib_.mvc_error(self._h()) or b"").decode(errors="replace")

    def close(self) -> None:
        """Frees every region still registered and disconnects; the mover
        then drops this connection's peers, imports and batches. Closing
        twice is a no-op."""
        c = self._c
        if c is None:
            return
        for r in list(self._regions.values()):
            try:
                self._free(r)
            except MoverError:
                pass  # the mover is gone: disconnecting releases the rest
        self._c = None
        self._keep = None
        self._wake_async()  # a wait_async() sleeping on the fd closed below
        _lib_.mvc_disconnect(c)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # A Client dropped without close(); at interpreter exit the
        # library may already be gone, and the process's exit closes all.
        if getattr(self, "_c", None) is not None:
            try:
                self.close()
            except Exception:
                pass

    def __repr__(self) -> str:
        if self._c is None:
            return "Client(closed)"
        i = self.info
        return f"Client(id={i.client_id}, shards={i.nshards}, provider={i.provider!r})"

    # -- memory --------------------------------------------------------------

    def _track(self, mem: _lib.mvc_mem, owner: Any = None, offset: int = 0) -> Region:
        r = Region(self, mem, owner, offset)
        self._regions[r.id] = r
        return r

    def alloc(self, nbytes: int, hugepages: str | None = None) -> Region:
        """A new region of nbytes (a sealed memfd) the mover can reach.
        hugepages: 'auto', 'never', 'require', 'hugetlb' or 'thp' (None: the
        connection's, see mvc_alloc(3)); region.info() says what it got."""
        c = self._h()
        nbytes = _index(nbytes, "nbytes")
        if nbytes == 0:
            raise ValueError("cannot allocate an empty region")
        modes = (None, "auto", "never", "require", "hugetlb", "thp")
        if hugepages not in modes:
            raise ValueError(f"hugepages must be one of {modes[1:]} or None, not {hugepages!r}")
        mem = _lib.mvc_mem()
        ret = _lib_.mvc_alloc_huge(c, nbytes, modes.index(hugepages), byref(mem))
        if ret < 0:
            raise self._fail(ret, "mvc_alloc")
        return self._track(mem)

    def register_fd(self, fd: int, offset: int, nbytes: int) -> Region:
        """A region over [offset, offset + nbytes) of an existing memfd
        (sealed against shrinking) or hugetlbfs file; fd is duplicated, the
        caller keeps its own."""
        c = self._h()
        if hasattr(fd, "fileno"):
            fd = fd.fileno()
        fd = _index(fd, "fd", 0x7FFFFFFF)
        offset = _index(offset, "offset")
        nbytes = _index(nbytes, "nbytes")
        if nbytes == 0:
            raise ValueError("cannot register an empty region")
        mem = _lib.mvc_mem()
        ret = _lib_.mvc_register_fd(c, fd, offset, nbytes, byref(mem))
        if ret < 0:
            raise self._fail(ret, "mvc_register_fd")
        return self._track(mem, offset=offset)

    def register_cuda(self, ptr: Any, nbytes: int | None = None) -> Region:
        """A region over CUDA device memory of this process: ptr is a device
        address (e.g. a torch CUDA tensor's data_ptr()) with nbytes, or a
        CUDA tensor itself (nbytes defaults to all of it, and the region
        keeps the tensor alive). cudaMalloc memory and VMM allocations made
        with POSIX-fd export allowed; MoverError ENOTSUP says why when CUDA
        is not there."""
        c = self._h()
        owner = None
        if hasattr(ptr, "data_ptr") and hasattr(ptr, "is_cuda"):
            if not ptr.is_cuda:
                raise TypeError("register_cuda takes CUDA memory; this tensor is on "
                                f"{ptr.device}: alloc() a region and use region.torch()")
            if not ptr.is_contiguous():
                raise ValueError("register_cuda needs a contiguous tensor")
            owner = ptr
            if nbytes is None:
                nbytes = ptr.numel() * ptr.element_size()
            ptr = ptr.data_ptr()
        ptr = _index(ptr, "ptr")
        if nbytes is None:
            raise TypeError("register_cuda(ptr, nbytes): give nbytes with a raw pointer")
        nbytes = _index(nbytes, "nbytes")
        if ptr == 0 or nbytes == 0:
            raise ValueError("register_cuda needs a non-null pointer and nbytes > 0")
        mem = _lib.mvc_mem()
        ret = _lib_.mvc_register_cuda(c, ptr, nbytes, byref(mem))
        if ret < 0:
            raise self._fail(ret, "mvc_register_cuda")
        return self._track(mem, owner)

    def _free(self, r: Region) -> None:
        c = self._h()
        if r._client is not self:
            raise ValueError(f"region {r.id} belongs to another Client")
        if r._mem is None:
            return
        ret = _lib_.mvc_free(c, byref(r._mem))
        self._regions.pop(r.id, None)
        self._paged_args = _NO_ARGS  # a write_paged from r must fail now
        r._release()  # libmvc unmapped and closed its side whatever ret says
        if ret < 0:
            raise self._fail(ret, "mvc_free")

    def free(self, region: Region) -> None:
        """The same as region.free()."""
        if not isinstance(region, Region):
            raise TypeError(f"free() takes a Region, not {type(region).__name__}")
        self._free(region)

    @property
    def regions(self) -> list[Region]:
        """The regions this client holds."""
        return list(self._regions.values())

    # -- batches -------------------------------------------------------------

    def _src(self, v: Any) -> int:
        if type(v) is Region:
            if v._client is not self:
                raise ValueError(f"region {v.id} belongs to another Client")
            if v._mem is None:
                raise ValueError(f"region {v.id} was freed")
            return v.id
        if isinstance(v, (Import, Peer)):
            raise TypeError(f"the source must be one of this client's Regions, not an "
                            f"{type(v).__name__}")
        return _u32(v, "source region")

    @staticmethod
    def _dst(v: Any) -> int:
        if type(v) is Import:
            return v.id
        if isinstance(v, (Region, Peer)):
            raise TypeError(f"the destination must be an Import (import_region() of the "
                            f"peer's blob), not a {type(v).__name__}")
        return _u32(v, "destination import")

    def write(self, src: Region | int, src_off: int, dst: Import | int, dst_off: int,
              nbytes: int) -> None:
        """Adds a write of nbytes from src at src_off to dst at dst_off to the
        open batch (opening one). MoverError EAGAIN: rings full right now,
        the batch as it was; poll and call again, or abort()."""
        c = self._h()
        s, d = self._src(src), self._dst(dst)
        so, do = _index(src_off, "src_off"), _index(dst_off, "dst_off")
        n = _index(nbytes, "nbytes")
        if n == 0:
            raise ValueError("write of 0 bytes")
        if type(src) is Region and so + n > src.nbytes:
            raise ValueError(f"region {s} is {src.nbytes} bytes; write of {n} at offset {so} "
                             f"exceeds it")
        ret = _lib_.mvc_write(c, s, so, d, do, n)
        if ret < 0:
            raise self._fail(ret, "mvc_write")

    def writev(self, src: Region | int, dst: Import | int, segs: Any) -> None:
        """Adds writes of segments (src_off, dst_off, len) from src to dst: an
        (n, 3) integer numpy array (uint64 C-contiguous passes untouched) or
        a sequence of triples."""
        c = self._h()
        s, d = self._src(src), self._dst(dst)
        a = segment_array(segs)
        if type(src) is Region:
            end = a[:, 0] + a[:, 2]
            over = end > src.nbytes
            if over.any():
                i = int(over.argmax())
                raise ValueError(f"segment {i}: region {s} is {src.nbytes} bytes; {int(a[i, 2])} "
                                 f"at offset {int(a[i, 0])} exceeds it")
        ret = _lib_.mvc_writev(c, s, d, _address(a), a.shape[0])
        if ret < 0:
            raise self._fail(ret, "mvc_writev")

    def write_paged(self, src: Region | int, dst: Import | int, src_pages: Any, dst_pages: Any,
                    page_size: int, *, src_base: int = 0, dst_base: int = 0,
                    src_stride: int | None = None, dst_stride: int | None = None) -> None:
        """Adds a paged write: page src_pages[i] of src goes to page
        dst_pages[i] of dst, page k starting at base + k * stride (stride
        defaults to page_size), page_size bytes each. The page arrays are
        1-D integer arrays of equal length (C-contiguous aligned native
        uint32 numpy arrays pass without a copy or a numpy call; others are
        range-checked and converted); libmvc copies them before the call
        returns, holding the GIL while it reads them. Pages past a region
        fail the batch with the mover's words. Where several arguments are
        wrong, the one raised for is checked in this order: src, dst,
        page_size and the strides; the page arrays; the bases."""
        c = self._c
        g = self._paged_args
        if not (src is g[0] and dst is g[1] and page_size is g[2] and src_stride is g[3] and
                dst_stride is g[4] and c is not None):
            c = self._paged_geometry(src, dst, page_size, src_stride, dst_stride)
        if type(src_base) is int and type(dst_base) is int and _LAYOUT_REF is not None:
            try:
                _pack_objs(self._objs, 0, id(src_pages), id(dst_pages), src_base, dst_base, 0)
            except struct.error:
                pass
            else:
                ret = _write_paged_objs(c, self._pages_ref, _LAYOUT_REF, self._objs_ref)
                if ret == 0:
                    return
                if ret < 0:
                    raise self._fail(ret, "mvc_write_paged")
        ret = _write_paged(self._paged(src_pages, dst_pages, src_base, dst_base), self._pages_ref)
        if ret < 0:
            raise self._fail(ret, "mvc_write_paged")

    def submit_paged(self, src: Region | int, dst: Import | int, src_pages: Any, dst_pages: Any,
                     page_size: int, *, src_base: int = 0, dst_base: int = 0,
                     src_stride: int | None = None, dst_stride: int | None = None,
                     cookie: int | None = None) -> int:
        """write_paged() then submit(), as one call into libmvc
        (mvc_submit_paged): a layer's pages as one batch, each foreign call
        of a layer loop costing what it does from Python. Arguments as
        write_paged's, and submit's cookie; returns the cookie. A write
        libmvc refuses leaves the open batch as it was; a submit it refuses
        leaves the batch open with the write in it (submit() or abort() it),
        and raises MoverError either way."""
        # A layer loop's call, each line of it measured (bench_submit.py):
        # with the region, import and geometry of the last call (see
        # _paged_geometry)
        # and plain int bases and cookie, one store and one foreign call,
        # which takes page arrays libmvc can use as they are (mvc_array_take)
        # and returns 1 for others. struct refuses bases and cookies that are
        # not 0 to 2**64 - 1; then _paged and _cookie_of say why, in their
        # words.
        if cookie is None:
            cookie = next(self._cookies)
        g = self._paged_args
        c = self._c
        if not (src is g[0] and dst is g[1] and page_size is g[2] and src_stride is g[3] and
                dst_stride is g[4] and c is not None):
            c = self._paged_geometry(src, dst, page_size, src_stride, dst_stride)
        if (type(src_base) is int and type(dst_base) is int and type(cookie) is int and
                _LAYOUT_REF is not None):
            try:
                _pack_objs(self._objs, 0, id(src_pages), id(dst_pages), src_base, dst_base,
                           cookie)
            except struct.error:
                pass
            else:
                ret = _submit_paged_objs(c, self._pages_ref, _LAYOUT_REF, self._objs_ref)
                if ret == 0:
                    return cookie
                if ret < 0:
                    raise self._fail(ret, "mvc_submit_paged")
        c = self._paged(src_pages, dst_pages, src_base, dst_base)
        ck = cookie if type(cookie) is int and 0 <= cookie <= U64_MAX else self._cookie_of(cookie)
        self._cookie.value = ck
        ret = _submit_paged(c, self._pages_ref, self._cookie)
        if ret < 0:
            raise self._fail(ret, "mvc_submit_paged")
        return ck

    def _paged(self, src_pages: Any, dst_pages: Any, src_base: Any, dst_base: Any) -> c_void_p:
        """Checks a paged write's page arrays and bases and stores them in
        self._pages for write_paged and submit_paged where their one-call
        path did not take them (page arrays numpy must convert, bases that
        are not plain ints in range); returns the connection. Raises what a
        closed client or bad arguments do."""
        # numpy's converted arrays, held until libmvc has copied them (the
        # caller's call, after this returns): until the next such call, or
        # close().
        c, sa, da, n, self._keep = self._checked_pages(src_pages, dst_pages)
        p = self._pages
        p.src_pages = sa
        p.dst_pages = da
        p.npages = n
        self._paged_bases(src_base, dst_base)
        return c

    def _checked_pages(self, src_pages: Any,
                       dst_pages: Any) -> tuple[c_void_p, int, int, int, tuple[Any, ...]]:
        """write_paged's arrays other than those libmvc takes as they are,
        once numpy checked and converted them: the connection, their
        addresses, their length, and the arrays to keep alive for the call.
        Raises what a closed client or bad arrays do."""
        c = self._h()
        sp = page_array(src_pages, "src_pages")
        dp = page_array(dst_pages, "dst_pages")
        if dp.shape[0] != sp.shape[0]:
            raise ValueError(f"src_pages has {sp.shape[0]} pages and dst_pages "
                             f"{dp.shape[0]}: give one destination page per source page")
        return c, _address(sp), _address(dp), sp.shape[0], (sp, dp)

    def _paged_bases(self, src_base: Any, dst_base: Any) -> None:
        """Checks write_paged's bases and stores them in self._pages."""
        p = self._pages
        p.src_base = _index(src_base, "src_base")
        p.dst_base = _index(dst_base, "dst_base")

    def _paged_geometry(self, src: Any, dst: Any, page_size: Any, src_stride: Any,
                        dst_stride: Any) -> c_void_p:
        """Checks write_paged's source, destination, page size and strides
        and stores them in self._pages; the next call with the same
        (immutable) objects skips this (_free forgets them when a region
        goes). Plain ints in range skip _index. Returns the connection;
        raises what a closed client or bad arguments do."""
        c = self._h()
        s, d, ps, ss, ds = self._geometry(src, dst, page_size, src_stride, dst_stride)
        p = self._pages
        p.src = s
        p.dst = d
        p.page_size = ps
        p.src_stride = ss
        p.dst_stride = ds
        # Only objects that cannot change behind the cache: not, say, a 0-d
        # numpy array given as page_size and then assigned to.
        t = _INT_OR_NONE
        if (type(page_size) is int and type(src_stride) in t and type(dst_stride) in t and
                type(src) in _SRC_TYPES and type(dst) in _DST_TYPES):
            self._paged_args = (src, dst, page_size, src_stride, dst_stride)
        else:
            self._paged_args = _NO_ARGS
        return c

    def _geometry(self, src: Any, dst: Any, page_size: Any, src_stride: Any,
                  dst_stride: Any) -> tuple[int, int, int, int, int]:
        """A paged write's source and destination ids, page size and
        strides, checked. Raises what bad ones do."""
        s = self._src(src)
        d = dst.id if type(dst) is Import else self._dst(dst)
        ps = page_size if type(page_size) is int and 0 <= page_size <= U64_MAX else \
            _index(page_size, "page_size")
        if ps == 0:
            raise ValueError("page_size is 0")
        ss = ps if src_stride is None else _index(src_stride, "src_stride")
        ds = ps if dst_stride is None else _index(dst_stride, "dst_stride")
        return s, d, ps, ss, ds

    def paged(self, src: Region | int, dst: Import | int, src_pages: Any, dst_pages: Any,
              page_size: int, *, src_stride: int | None = None,
              dst_stride: int | None = None) -> PagedWrite:
        """A paged write checked once, as write_paged() takes it but for the
        bases, to send again and again with other bases: a loop over a
        request's layers, each layer's pages at its own base. Each
        PagedWrite.submit() or .write() then costs two stores and the
        foreign call. Page numbers are read at each call: those of the
        arrays given where they are C-contiguous aligned native uint32 (it
        holds them, so numpy refuses to resize them meanwhile), else of
        numpy's converted copies, made here once. Raises what write_paged()
        raises for bad arguments."""
        _, sa, da, n, keep = self._checked_pages(src_pages, dst_pages)
        s, d, ps, ss, ds = self._geometry(src, dst, page_size, src_stride, dst_stride)
        pages = _lib.mvc_pages(src=s, dst=d, page_size=ps, src_stride=ss, dst_stride=ds,
                               src_pages=sa, dst_pages=da, npages=n)
        return PagedWrite(self, src if type(src) is Region else None,
                          dst if type(dst) is Import else None, pages, keep)

    def write_imm(self, dst: Import | int, imm: int) -> None:
        """After every write of the batch has landed, the client owning
        dst's region receives imm (one per batch)."""
        c = self._h()
        ret = _lib_.mvc_write_imm(c, self._dst(dst), _u32(imm, "imm"))
        if ret < 0:
            raise self._fail(ret, "mvc_write_imm")

    def submit(self, cookie: int | None = None) -> int:
        """Hands the open batch to the mover (non-blocking); one BATCH event
        with this cookie reports it. Returns the cookie (a new one from a
        counter when None)."""
        c = self._c
        if c is None:
            c = self._h()
        ck = cookie if type(cookie) is int and 0 <= cookie <= U64_MAX else self._cookie_of(cookie)
        self._cookie.value = ck
        ret = _submit(c, self._cookie)
        if ret < 0:
            raise self._fail(ret, "mvc_submit")
        return ck

    def _cookie_of(self, cookie: Any) -> int:
        """A cookie that is not a plain int in range: None takes the next
        of the counter, anything else is checked as an index (submit,
        submit_paged and PagedWrite.submit test the plain int in place)."""
        if cookie is None:
            return next(self._cookies)
        return _index(cookie, "cookie")

    def abort(self) -> None:
        """Drops the open batch, if any."""
        _lib_.mvc_abort(self._h())

    # -- completions (poll, wait, wait_for, wait_batch: mover._completions) ----

    def imm_expect(self, imm: int, count: int, cookie: int = 0) -> None:
        """Asks for one IMM_COUNT event (with cookie) once count immediates
        of value imm have arrived, counting those already here; immediates of
        a value being counted are not reported one by one. If this client's
        own mover goes first, the event comes then, once, with cause
        MOVER_GONE and the count that had arrived (ask again once it is back;
        the same for imm_expect_from)."""
        c = self._h()
        imm, count = _u32(imm, "imm"), _u32(count, "count")
        if count == 0:
            raise ValueError(f"expecting 0 immediates of {imm}")
        ret = _lib_.mvc_imm_expect(c, imm, count, _index(cookie, "cookie"))
        if ret < 0:
            raise self._fail(ret, "mvc_imm_expect")

    def imm_expect_from(self, peer: Peer | int, imm: int, count: int, cookie: int = 0) -> None:
        """imm_expect, naming the peer the immediates come from: if its mover
        exits, stops answering heartbeats or is cut off first, the IMM_COUNT
        event comes with status < 0 and cause PEER_DEAD or PEER_BAD, its
        count what had arrived, its msg naming the peer's mover."""
        c = self._h()
        if isinstance(peer, (Import, Region)):
            raise TypeError(f"imm_expect_from() takes a Peer, not {type(peer).__name__}")
        pid = _u32(peer, "peer")
        imm, count = _u32(imm, "imm"), _u32(count, "count")
        if count == 0:
            raise ValueError(f"expecting 0 immediates of {imm}")
        ret = _lib_.mvc_imm_expect_from(c, pid, imm, count, _index(cookie, "cookie"))
        if ret < 0:
            raise self._fail(ret, "mvc_imm_expect_from")

    def latency(self) -> Latency:
        """How long immediates waited in our completion rings (mvc_latency)."""
        lat = _lib.mvc_latency()
        ret = _lib_.mvc_latency(self._h(), byref(lat))
        if ret < 0:
            raise self._fail(ret, "mvc_latency")
        return Latency(lat.count, lat.sum_ns, tuple(lat.hist))

    def shard_bytes(self, shard: int) -> int:
        """Bytes this client sent through one mover shard."""
        return _lib_.mvc_shard_bytes(self._h(), self._shard(shard))

    def shard_descs(self, shard: int) -> int:
        """WRITE descriptors this client sent through one mover shard."""
        return _lib_.mvc_shard_descs(self._h(), self._shard(shard))

    def _shard(self, shard: int) -> int:
        s = _u32(shard, "shard")
        if s >= self.info.nshards:
            raise ValueError(f"shard {s}: this mover has {self.info.nshards} shards")
        return s

