# SPDX-License-Identifier: MIT
"""The part of mover.Client that reaches other movers: this mover's address
blob and a region's blob, peers (peer_add, peer_remove), imports
(import_region, unimport), and named regions in an etcd cluster (publish,
unpublish, lookup); and the handles they return, Peer, Import and Found. A
mixin: Client (mover.client) holds the connection."""
from __future__ import annotations

import ctypes
from ctypes import byref, c_size_t, c_uint32, c_void_p
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from . import _lib
from .errors import MoverError
from .memory import Region, _index

if TYPE_CHECKING:
    from .client import Client

U32_MAX = 0xFFFFFFFF
_lib_ = _lib.lib


class Found(NamedTuple):
    """What Client.lookup() found and set up (struct mvc_found)."""
    peer: Peer      # the owner mover, as this client's peer
    dst: Import     # the named region, imported: the destination of writes
    nbytes: int     # its length
    mover_id: int   # the owner mover


class Peer:
    """A peer mover added with Client.peer_add; id is its handle."""
    __slots__ = ("_client", "id", "removed")

    def __init__(self, client: Client, pid: int) -> None:
        self._client = client
        self.id = pid
        self.removed = False

    def remove(self) -> None:
        """Forgets the peer (mvc_peer_remove); its imports go with it."""
        self._client.peer_remove(self)

    def __index__(self) -> int:
        return self.id

    def __repr__(self) -> str:
        return f"Peer(id={self.id}{', removed' if self.removed else ''})"


class Import:
    """A peer's region imported with Client.import_region: the destination
    of writes. id is its handle."""
    __slots__ = ("_client", "id", "peer", "removed")

    def __init__(self, client: Client, hid: int, peer: int) -> None:
        self._client = client
        self.id = hid
        self.peer = peer
        self.removed = False

    def unimport(self) -> None:
        """Forgets the imported region (mvc_unimport)."""
        self._client.unimport(self)

    def __index__(self) -> int:
        return self.id

    def __repr__(self) -> str:
        return f"Import(id={self.id}, peer={self.peer}{', removed' if self.removed else ''})"


def _u32(v: Any, what: str) -> int:
    return _index(v, what, U32_MAX)


def _bytes(v: Any, what: str) -> bytes:
    if isinstance(v, bytes):
        return v
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    raise TypeError(f"{what} must be bytes, not {type(v).__name__}")


class Peers:
    """Client's calls on peers, imports and names (see mover.Client). One
    thread at a time per Client, as in C."""

    # Client has _h() (the connection, or ValueError when closed), _fail()
    # (a MoverError in libmvc's words) and _src() (a region's handle).
    _h: Callable[[], c_void_p]
    _fail: Callable[[int, str], MoverError]
    _src: Callable[[Any], int]

    # -- blobs, peers, imports -----------------------------------------------

    def address(self) -> bytes:
        """This mover's address blob, for a peer's peer_add()."""
        c = self._h()
        buf = ctypes.create_string_buffer(_lib.BLOB_MAX)
        n = c_size_t(_lib.BLOB_MAX)
        ret = _lib_.mvc_address(c, buf, byref(n))
        if ret < 0:
            raise self._fail(ret, "mvc_address")
        return buf.raw[:n.value]

    def region_blob(self, region: Region | int) -> bytes:
        """The blob of one of this client's regions, for a peer's import_region()."""
        c = self._h()
        rid = self._src(region)
        buf = ctypes.create_string_buffer(_lib.BLOB_MAX)
        n = c_size_t(_lib.BLOB_MAX)
        ret = _lib_.mvc_region_blob(c, rid, buf, byref(n))
        if ret < 0:
            raise self._fail(ret, "mvc_region_blob")
        return buf.raw[:n.value]

    def peer_add(self, address: bytes) -> Peer:
        """Adds the mover whose address() blob this is as a peer."""
        c = self._h()
        address = _bytes(address, "address")
        if not address:
            raise ValueError("address is empty")
        out = c_uint32()
        ret = _lib_.mvc_peer_add(c, address, len(address), byref(out))
        if ret < 0:
            raise self._fail(ret, "mvc_peer_add")
        return Peer(self, out.value)

    def peer_remove(self, peer: Peer | int) -> None:
        c = self._h()
        if isinstance(peer, Import):
            raise TypeError("peer_remove() takes a Peer; to drop an Import, unimport() it")
        pid = _u32(peer, "peer")
        ret = _lib_.mvc_peer_remove(c, pid)
        if ret < 0:
            raise self._fail(ret, "mvc_peer_remove")
        if isinstance(peer, Peer):
            peer.removed = True

    def import_region(self, peer: Peer | int, blob: bytes) -> Import:
        """Imports a peer's region from its region_blob(): the handle is the
        destination of writes."""
        c = self._h()
        if isinstance(peer, (Import, Region)):
            raise TypeError(f"import_region() takes a Peer, not {type(peer).__name__}")
        pid = _u32(peer, "peer")
        blob = _bytes(blob, "blob")
        if not blob:
            raise ValueError("blob is empty")
        out = c_uint32()
        ret = _lib_.mvc_import(c, pid, blob, len(blob), byref(out))
        if ret < 0:
            raise self._fail(ret, "mvc_import")
        return Import(self, out.value, pid)

    def unimport(self, handle: Import | int) -> None:
        c = self._h()
        if isinstance(handle, (Peer, Region)):
            raise TypeError(f"unimport() takes an Import, not {type(handle).__name__}")
        hid = _u32(handle, "handle")
        ret = _lib_.mvc_unimport(c, hid)
        if ret < 0:
            raise self._fail(ret, "mvc_unimport")
        if isinstance(handle, Import):
            handle.removed = True

    # -- named regions (mover --etcd --cluster) -------------------------------

    @staticmethod
    def _name(name: str) -> bytes:
        if not isinstance(name, str):
            raise TypeError(f"name must be str, not {type(name).__name__}")
        b = name.encode()
        if not 0 < len(b) < _lib.NAME_MAX:
            raise ValueError(f"a region name is 1 to {_lib.NAME_MAX - 1} bytes; got {len(b)}")
        return b

    def publish(self, region: Region | int, name: str) -> None:
        """Puts one of this client's regions in the mover's cluster under
        name: every mover of the cluster may then write it. Returns once etcd
        holds it; MoverError EEXIST when another region has the name,
        ENOTCONN when the mover is in no cluster or etcd does not answer."""
        c = self._h()
        rid = self._src(region)
        ret = _lib_.mvc_publish(c, rid, self._name(name))
        if ret < 0:
            raise self._fail(ret, "mvc_publish")

    def unpublish(self, name: str) -> None:
        """Takes back a name this client published."""
        c = self._h()
        ret = _lib_.mvc_unpublish(c, self._name(name))
        if ret < 0:
            raise self._fail(ret, "mvc_unpublish")

    def lookup(self, name: str, timeout: float = 0.0) -> Found:
        """Finds a region published in the cluster, adds its mover as a peer
        and imports it, in one call. Waits up to timeout seconds for the name
        to appear (MoverError ETIMEDOUT after; ENOENT at once with 0)."""
        c = self._h()
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool):
            raise TypeError(f"timeout must be a number, not {type(timeout).__name__}")
        if not 0 <= timeout <= 86400:
            raise ValueError(f"timeout {timeout}: give seconds in [0, 86400]")
        out = _lib.mvc_found()
        ret = _lib_.mvc_lookup(c, self._name(name), int(timeout * 1000), byref(out))
        if ret < 0:
            raise self._fail(ret, "mvc_lookup")
        return Found(Peer(self, out.peer), Import(self, out.dst, out.peer), out.len, out.mover_id)
