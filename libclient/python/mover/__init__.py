# SPDX-License-Identifier: MIT
"""mover: move bytes between machines' memories through the local mover
daemon, from Python. A pure-Python binding of libmvc (mvc.h) over ctypes.

    import mover, numpy as np
    with mover.Client() as c, c.alloc(64 << 20) as kv:
        peer = c.peer_add(peer_address)              # the peer's Client.address()
        dst = c.import_region(peer, peer_blob)       # the peer's Region.blob()
        c.write_paged(kv, dst, src_pages, dst_pages, page_size=16384)
        c.write_imm(dst, 42)                         # the peer hears once all landed
        c.wait_batch(c.submit(), timeout=10)

Regions give their bytes as memoryview (Region.memory), numpy
(Region.numpy()) and torch (Region.torch()). Errors: MoverError (errno,
cause, message); bad arguments raise TypeError or ValueError first.
"""
from ._lib import BLOB_MAX
from ._peers import Found, Import, Peer
from .client import Client, Info
from .errors import Cause, MoverError
from .events import Event, EventType, Latency
from .memory import GpuPath, Region
from .paged import PagedWrite

__all__ = ["BLOB_MAX", "Cause", "Client", "Event", "EventType", "Found", "GpuPath", "Import",
           "Info", "Latency", "MoverError", "PagedWrite", "Peer", "Region", "library_path",
           "library_version"]


def library_path() -> str:
    """The libmvc this binding loaded."""
    from ._lib import lib
    return lib.path


def library_version() -> str:
    """The version of the libmvc this binding loaded, "MAJOR.MINOR.PATCH"
    (mvc_version)."""
    from ._lib import lib
    return lib.mvc_version().decode()
