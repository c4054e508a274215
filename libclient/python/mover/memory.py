# SPDX-License-Identifier: MIT
"""Region: memory the mover can reach (struct mvc_mem), with its bytes as a
memoryview, a numpy array or a torch tensor.

Host regions are memfds. The views are a second mapping of the region's
memfd made by Python's mmap module, which counts its exports: a view kept
past free() stays valid memory (the pages live as long as any mapping does),
it just no longer receives the mover's writes, so no use of a view can touch
unmapped memory. GPU regions (register_cuda) have no host views.
"""
from __future__ import annotations

import ctypes
import enum
import mmap
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from . import _lib

if TYPE_CHECKING:
    from .client import Client

MEM_GPU = 1  # MVC_MEM_GPU
MEM_HUGETLB = 2  # MVC_MEM_HUGETLB
MEM_THP = 4  # MVC_MEM_THP
HUGE_PAGE = 2 << 20


class GpuPath(enum.IntEnum):
    """How the mover moves a region's bytes (enum mvc_gpu_path)."""
    HOST = 0  # host memory
    HMEM = 1  # the fabric reads and writes GPU memory itself
    COPY = 2  # same host: CUDA copies, no fabric
    STAGED = 3  # through pinned host bounce buffers


class Region:
    """A registered region. id: the region id for writes and blobs; addr:
    this process's address of it (the device pointer for GPU memory);
    nbytes: its length. Use it as a context manager, or call free(); the
    Client frees what is left when it closes."""

    __slots__ = ("_client", "_mem", "_map", "_skip", "_offset", "_owner", "id", "addr", "nbytes",
                 "flags", "path", "__weakref__")

    def __init__(self, client: Client, mem: _lib.mvc_mem, owner: Any = None,
                 offset: int = 0) -> None:
        self._client = client
        self._mem = mem
        self._map: mmap.mmap | None = None
        self._offset = offset  # where the region starts in its file (register_fd)
        self._skip = 0  # bytes of the mapping before the region (offset's page remainder)
        self._owner = owner  # what register_cuda was given, kept alive while registered
        self.id: int = mem.region
        self.addr: int = mem.addr or 0
        self.nbytes: int = mem.len
        self.flags: int = mem.flags
        try:
            self.path: GpuPath | int = GpuPath(mem.path)
        except ValueError:
            self.path = mem.path

    @property
    def is_gpu(self) -> bool:
        return bool(self.flags & MEM_GPU)

    @property
    def freed(self) -> bool:
        return self._mem is None

    @property
    def fd(self) -> int:
        """The memfd behind a host region (owned by libmvc; -1 for GPU memory)."""
        self._live()
        return self._mem.fd

    def _live(self) -> None:
        if self._mem is None:
            raise ValueError(f"region {self.id} was freed")

    def _mapping(self) -> mmap.mmap:
        self._live()
        if self.is_gpu:
            raise TypeError(f"region {self.id} is GPU memory and has no host view; use the "
                            f"tensor it was registered from")
        if self._map is None:
            # A hugetlb file maps (and unmaps) in whole 2 MiB pages only.
            unit = HUGE_PAGE if self.flags & MEM_HUGETLB else mmap.ALLOCATIONGRANULARITY
            base = self._offset - self._offset % unit
            length = -(-(self.nbytes + self._offset - base) // unit) * unit
            # Populating the page tables of resident pages runs at several
            # GB/s; faulting them in one by one on first touch is slower.
            self._map = mmap.mmap(self._mem.fd, length,
                                  flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
                                  prot=mmap.PROT_READ | mmap.PROT_WRITE, offset=base)
            self._skip = self._offset - base
        return self._map

    @property
    def memory(self) -> memoryview:
        """The region's bytes as a writable memoryview (format 'B')."""
        mv = memoryview(self._mapping())
        return mv[self._skip:self._skip + self.nbytes]

    def info(self) -> dict[str, Any]:
        """What backs the region and what registering it cost
        (mvc_mem_info(3)): backing ('4k', 'hugetlb', 'thp' or 'gpu'),
        page_size, alloc_ns, map_ns, mr_ns, and why (not huge pages)."""
        self._live()
        inf = _lib.mvc_mem_info()
        ret = _lib.lib.mvc_mem_info(self._client._h(), ctypes.byref(self._mem),
                                       ctypes.byref(inf))
        if ret < 0:
            raise self._client._fail(ret, "mvc_mem_info")
        return {"backing": ("4k", "hugetlb", "thp", "gpu")[inf.backing % 4],
                "page_size": inf.page_size, "alloc_ns": inf.alloc_ns, "map_ns": inf.map_ns,
                "mr_ns": inf.mr_ns, "why": inf.why.decode(errors="replace")}

    def numpy(self, dtype: Any = np.uint8, shape: int | Sequence[int] | None = None,
              offset: int = 0) -> np.ndarray:
        """The region's bytes from offset as a numpy array of dtype, of shape
        (all that fits when None). Shares memory with the region."""
        dt = np.dtype(dtype)
        count = self._count(shape, dt.itemsize, offset)
        a = np.frombuffer(self._mapping(), dtype=dt, count=count,
                          offset=self._skip + offset)
        return a if shape is None else a.reshape(shape)

    def torch(self, dtype: Any = None, shape: int | Sequence[int] | None = None,
              offset: int = 0):
        """The region's bytes from offset as a CPU torch tensor of dtype
        (torch.uint8 when None), of shape (all that fits when None), made
        with torch.frombuffer: it shares memory with the region. Raises
        ImportError when torch is not importable."""
        import torch  # optional: only this method needs it

        dt = torch.uint8 if dtype is None else dtype
        if not isinstance(dt, torch.dtype):
            raise TypeError(f"dtype must be a torch.dtype, not {type(dt).__name__}")
        itemsize = torch.empty((), dtype=dt).element_size()
        count = self._count(shape, itemsize, offset)
        t = torch.frombuffer(memoryview(self._mapping()), dtype=dt, count=count,
                             offset=self._skip + offset)
        return t if shape is None else t.view(tuple(shape) if not isinstance(shape, int)
                                              else (shape,))

    def _count(self, shape, itemsize: int, offset: int) -> int:
        offset = _index(offset, "offset")
        if offset > self.nbytes:
            raise ValueError(f"offset {offset} lies past region {self.id} ({self.nbytes} bytes)")
        if shape is None:
            if (self.nbytes - offset) % itemsize:
                raise ValueError(f"region {self.id} has {self.nbytes - offset} bytes from offset "
                                 f"{offset}, not a whole number of {itemsize}-byte items; "
                                 f"give a shape")
            return (self.nbytes - offset) // itemsize
        dims = (shape,) if isinstance(shape, int) else tuple(shape)
        count = 1
        for d in dims:
            d = _index(d, "shape")
            count *= d
        if offset + count * itemsize > self.nbytes:
            raise ValueError(f"shape {dims} of {itemsize}-byte items from offset {offset} needs "
                             f"{offset + count * itemsize} bytes; region {self.id} has "
                             f"{self.nbytes}")
        return count

    def blob(self) -> bytes:
        """The region blob a peer imports to write here (a capability: whoever
        holds it may write into this region)."""
        self._live()
        return self._client.region_blob(self)

    def free(self) -> None:
        """Deregisters the region and unmaps libmvc's mapping. Views made
        before stay valid memory but no longer see the mover's writes.
        Freeing twice is a no-op."""
        if self._mem is not None:
            self._client._free(self)

    def _release(self) -> None:
        """Drops the Python mapping unless views still export it (then it
        goes when the last of them does)."""
        self._mem = None
        self._owner = None
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                pass
            self._map = None

    def __index__(self) -> int:
        return self.id

    def __enter__(self) -> Region:
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()

    def __repr__(self) -> str:
        state = "freed" if self._mem is None else ("gpu " + self.path.name.lower()
                                                   if self.is_gpu and isinstance(self.path, GpuPath)
                                                   else "host")
        return f"Region(id={self.id}, nbytes={self.nbytes}, {state})"


def _index(v: Any, what: str, hi: int = (1 << 64) - 1) -> int:
    """v as a Python int in [0, hi]: TypeError when not an integer, ValueError when out of range."""
    if isinstance(v, bool) or not hasattr(v, "__index__"):
        raise TypeError(f"{what} must be an integer, not {type(v).__name__}")
    v = v.__index__()
    if v < 0 or v > hi:
        raise ValueError(f"{what} is {v}; it must be 0 to {hi}")
    return v
