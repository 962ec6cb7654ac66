"""MPI: the library's call for each collective and our algorithms over MPI point-to-point, on host
buffers, timed in native code (commbench._host). With --device cuda only the library's call runs,
on GPU buffers, and only with a CUDA-aware MPI library."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..collectives.impls import ALGORITHM_TRANSPORT
from ..errors import CommbenchError


class MpiTransport:
    name = "mpi"
    p2p_device = "cpu"
    p2p_summary = "the default; host buffers, native loops"
    captures_graphs = False  # --graph: no stream of its own to capture

    def impls(self, coll, device: str) -> dict[Optional[str], str]:
        """Our algorithm (None: the library's call) -> what it is."""
        library = {None: f"the MPI library's {coll.title} call" +
                         (" on GPU buffers (CUDA-aware MPI)" if device == "cuda" else "")}
        if ALGORITHM_TRANSPORT[device] != self.name:
            return library
        return {**library, **{name: f"{text} over MPI point-to-point" for name, text in coll.algorithms.items()}}

    def prepare(self, world, cfg, what: str) -> None:
        """`what` needs MPI: the option or command a refusal names."""
        world.require_mpi(what)
        if cfg.device == "cuda":
            from .. import _host
            if not _host.mpi_cuda_aware():
                raise CommbenchError(f"--impl mpi --device cuda: {_host.mpi_library_version().splitlines()[0][:60]} "
                                     f"is not CUDA-aware; use --impl nccl, or 'commbench copy' to see what staging "
                                     f"through host memory costs")
            from ..node.gpu import take_gpu
            take_gpu(world)  # where the rank's data lives

    def times(self, world, coll, algorithm: Optional[str], send, recv, op: int, iters: int, cfg, agg: int,
              delay_s: float, loop: int = 1, gated: bool = True) -> np.ndarray:
        from .. import _host
        from .native import native_call
        return np.asarray(_host.collective_times(*native_call(_host, coll, algorithm), send, recv, op, cfg.root, iters,
                                                 world.comm.py2f(), cfg.chunk_bytes, agg, delay_s, loop))

    def open_pairs(self, world, pairs, window: int) -> Optional[MpiPair]:
        """One split of the world gives every pair of `pairs` (disjoint) a two-rank communicator, in
        which the pair's first rank is 0, so the native loops need no peer id."""
        from mpi4py import MPI
        mine = next((pair for pair in pairs if world.rank in pair), None)
        if mine is None:
            world.comm.Split(MPI.UNDEFINED, 0)
            return None
        comm = world.comm.Split(pairs.index(mine), list(mine).index(world.rank))
        return MpiPair(comm, world.rank == mine[0], window)


class MpiPair:
    """A rank pair over its own MPI communicator, on host buffers, timed in native loops."""
    device = "cpu"

    def __init__(self, comm, first: bool, window: int):
        self.comm, self.first, self.window = comm, first, window

    def times(self, test: str, send, recv, size: int, iters: int, loop: int = 1) -> np.ndarray:
        from .. import _host
        if test == "pingpong":
            return np.asarray(_host.pingpong_times(send, recv, size, iters, self.comm.py2f(), loop))
        return np.asarray(_host.bandwidth_times(send, recv, size, self.window, iters, self.comm.py2f(), loop))

    def close(self) -> None:
        self.comm.Free()


MPI = MpiTransport()
