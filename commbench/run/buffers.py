"""Buffers a sweep measures on: page-aligned as OSU and nccl-tests allocate theirs, allocated once at
the largest size, and refused up front where they would not fit a rank's GPU. Host buffers are NumPy
arrays and GPU buffers commbench._cuda's own (device_arrays.py): a rank never imports torch (seconds of
its start and hundreds of MB of its memory) for its buffers, only where an impl it runs is torch's own
(gloo)."""

from __future__ import annotations

import mmap
from typing import Callable, Optional

import numpy as np

from ..collectives.dtypes import itemsize_of, numpy_dtype
from ..errors import CommbenchError
from .preflight import memory_problem

# Value the output buffer holds before an out-of-place check, so a missing copy shows as wrong (the
# native checks' kStaleValue, pattern.h, for a buffer that must stay untouched).
_STALE = 77
_PAGE = 4096


def check_device_memory(world, need_per_rank: int, what: str, p2p_peers: int, communicators: int = 1) -> None:
    """Refuses up front a sweep whose largest buffers do not fit in a rank's GPU, NCCL's own buffers
    (their bound, with `p2p_peers` reached by point-to-point calls, for each of `communicators` that
    make calls: a forced variant's has buffers of its own) on top of ours. (The host's memory was checked
    before the ranks started, preflight.py; a GPU's is seen by its rank alone.)"""
    from ..node.gpu import cuda_module, nccl_reserve_bytes
    avail = cuda_module().mem_get_info(world.device)[0]
    nccl = communicators * nccl_reserve_bytes(world.size, world.local_size, p2p_peers)
    problem = memory_problem(what, need_per_rank + nccl, avail, f"GPU {world.device} (with NCCL's buffers)")
    problems = world.gather(problem)
    first = world.bcast(next((p for p in problems if p), None) if world.rank == 0 else None)
    if first:
        raise CommbenchError(first)


def page_aligned(nbytes: int, device: Optional[int] = None):
    """A byte buffer that starts on a page boundary, as OSU allocates its message buffers: a NumPy
    array in host memory (device None), else a DeviceArray on that GPU.

    Host memory is an anonymous mapping of its own, the pages a C program's malloc gets for a large
    buffer (OSU's, nccl-tests'). NumPy's own arrays of 4 MiB and more are advised onto transparent
    huge pages, where the kernel's single-copy transfer between processes (CMA, which Open MPI's
    shared-memory transport uses for large messages) pins 512 times fewer pages: on the development
    VM that made a 4 MiB ping-pong 2.1x and a 16 MiB one 1.7x faster than on the pages OSU gets, a
    difference of allocation, not of the path being measured (docs/method.md, "Beside OSU 7.4")."""
    if device is None:
        return np.frombuffer(mmap.mmap(-1, max(nbytes, 1)), dtype=np.uint8)[:nbytes]
    from .device_arrays import DeviceArray
    raw = DeviceArray.empty(nbytes + _PAGE, "uint8", device)
    start = -raw.data_ptr() % _PAGE
    return raw[start:start + nbytes]


def allocator(device: Optional[int] = None) -> Callable:
    """allocate(count, dtype name): page-aligned buffers in host memory (device None) or on a GPU;
    where a buffer starts changes what the library's copies cost."""
    def allocate(count: int, dtype: str):
        raw = page_aligned(count * itemsize_of(dtype), device)
        return raw.view(numpy_dtype(dtype)) if device is None else raw.view(dtype)
    return allocate


class Buffers:
    """A sweep's send and receive buffers, allocated once at the largest size: each size takes views
    of them, so a sweep faults its pages in once rather than at every size and impl. Views follow
    nccl-tests' layout: out of place, two buffers, the receive one stale; in place, one buffer with
    send and receive at the collective's offsets: the receive buffer, which a run of both placements
    allocates at the larger of the two sizes (as nccl-tests does)."""

    def __init__(self, coll, largest, dtype: str, placements: tuple[bool, ...], allocate):
        """`allocate(count, dtype)` makes a buffer; `largest` is the Shape of the largest size;
        `placements`: in_place of each call the sweep makes (RunConfig.placements)."""
        self.coll = coll
        self.send = allocate(largest.send, dtype) if False in placements else None
        self.recv = allocate(max(largest.send, largest.recv) if True in placements else largest.recv, dtype)

    def views(self, shape, rank: int, in_place: bool):
        """(send, recv) of one call; the stale values go where no input will overwrite them."""
        if in_place:
            so, ro = self.coll.places(rank, shape)
            whole = self.recv[:max(shape.send, shape.recv)]
            whole[:] = _STALE
            return whole[so:so + shape.send], whole[ro:ro + shape.recv]
        recv = self.recv[:shape.recv]
        recv[:] = _STALE
        return self.send[:shape.send], recv
