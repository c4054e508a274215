# SPDX-License-Identifier: MIT
"""A paged write checked once and sent many times (Client.paged()): a loop
over a request's layers writes the same pages of every layer, each layer at
its own base, and pays for the arguments' checks once. Each call stores the
two bases (and the cookie) and makes the foreign call; what can change
between calls (the client closing, the source region freed, the import
removed) is looked at each time."""
from __future__ import annotations

from ctypes import byref, c_uint64
from typing import TYPE_CHECKING, Any

from . import _lib
from .memory import _index

if TYPE_CHECKING:
    from ._peers import Import
    from .client import Client
    from .memory import Region

U64_MAX = (1 << 64) - 1
# Called with ctypes objects only (mover._lib.raw), as Client's hot calls.
_write_paged = _lib.raw.mvc_write_paged
_submit_paged = _lib.raw.mvc_submit_paged


class PagedWrite:
    """A paged write (Client.write_paged()'s arguments but the bases),
    checked once by Client.paged(). Concurrency as its Client's: one thread
    at a time.

        pw = c.paged(kv, dst, src_pages, dst_pages, page_size)
        for layer in range(layers):
            pw.write(layer * layer_bytes, layer * layer_bytes)
        c.submit()
    """
    __slots__ = ("_client", "_src", "_dst", "_pages", "_ref", "_keep", "_cookie")

    def __init__(self, client: Client, src: Region | None, dst: Import | None,
                 pages: _lib.mvc_pages, keep: tuple[Any, ...]) -> None:
        self._client = client
        self._src = src  # the Region given (None: an id), looked at for a free
        self._dst = dst  # the Import given (None: an id), looked at for a removal
        self._pages = pages
        self._ref = byref(pages)
        self._keep = keep  # the page arrays libmvc reads at each call
        self._cookie = c_uint64()

    @property
    def npages(self) -> int:
        """Pages a call writes."""
        return self._pages.npages

    def _conn(self, src_base: Any, dst_base: Any) -> Any:
        """The connection, once the bases are stored; raises what a closed
        client, a freed source, a removed import or bad bases do."""
        c = self._client._c
        s, d = self._src, self._dst
        if c is None or (s is not None and s._mem is None) or (d is not None and d.removed):
            self._gone()
        p = self._pages
        if (type(src_base) is int and type(dst_base) is int and 0 <= src_base <= U64_MAX and
                0 <= dst_base <= U64_MAX):
            p.src_base = src_base
            p.dst_base = dst_base
        else:
            p.src_base = _index(src_base, "src_base")
            p.dst_base = _index(dst_base, "dst_base")
        return c

    def _gone(self) -> None:
        if self._client._c is None:
            raise ValueError("the client is closed")
        if self._src is not None and self._src._mem is None:
            raise ValueError(f"region {self._src.id} was freed")
        raise ValueError(f"import {self._dst.id} was removed")

    def write(self, src_base: int = 0, dst_base: int = 0) -> None:
        """Adds the paged write with these bases to the open batch (opening
        one), as Client.write_paged() does."""
        ret = _write_paged(self._conn(src_base, dst_base), self._ref)
        if ret < 0:
            raise self._client._fail(ret, "mvc_write_paged")

    def submit(self, src_base: int = 0, dst_base: int = 0, *, cookie: int | None = None) -> int:
        """The paged write with these bases, then submit(), as one call
        (mvc_submit_paged), as Client.submit_paged() does; returns the
        cookie."""
        c = self._conn(src_base, dst_base)
        ck = cookie if type(cookie) is int and 0 <= cookie <= U64_MAX else \
            self._client._cookie_of(cookie)
        self._cookie.value = ck
        ret = _submit_paged(c, self._ref, self._cookie)
        if ret < 0:
            raise self._client._fail(ret, "mvc_submit_paged")
        return ck

    def __repr__(self) -> str:
        p = self._pages
        return (f"PagedWrite(src={p.src}, dst={p.dst}, npages={p.npages}, "
                f"page_size={p.page_size})")
