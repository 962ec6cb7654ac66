"""MPI: the library's call for each collective and our algorithms over MPI point-to-point, on host
buffers, timed in native code (commbench._host). With --device cuda only the library's call runs,
on GPU buffers, and only with a CUDA-aware MPI library."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..collectives.impls import ALGORITHM_TRANSPORT
from ..errors import CommbenchError
from .base import Transport


class MpiTransport(Transport):
    name = "mpi"
    p2p_device = "cpu"
    p2p_summary = "the default; host buffers, native loops"
    captures_graphs = False  # --graph: no stream of its own to capture
    overlaps = True  # the library's non-blocking calls (MPI_Iallreduce, ...): `overlap`

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
        return np.asarray(_host.collective_times(*native_call(_host, coll, algorithm), send, recv, op=op, root=cfg.root,
                                                 iters=iters, comm=world.comm.py2f(), chunk_bytes=cfg.chunk_bytes, agg=agg,
                                                 delay_s=delay_s, loop=loop))

    def overlap_times(self, world, coll, send, recv, op: int, iters: int, cfg, sweeps: int, probes: int):
        """This rank's OverlapTimes of the library's non-blocking call beside `sweeps` of the computation
        (run/overlap.py; commbench._host's overlap_times says what each list holds)."""
        from .. import _host
        from .native import native_call
        collective, _ = native_call(_host, coll, None)
        return _host.overlap_times(collective, send, recv, op=op, root=cfg.root, iters=iters, comm=world.comm.py2f(),
                                   sweeps=sweeps, probes=probes)

    def open_pairs(self, world, pairs, window: int) -> Optional[MpiPair]:
        """This rank's side of its pair among `pairs` (disjoint), on the world communicator: the native
        loops take the peer's rank and synchronise the pair alone, so a round of a thousand pairs
        needs no communicator of its own (no collective at all: ranks of no pair just wait)."""
        mine = next((pair for pair in pairs if world.rank in pair), None)
        if mine is None:
            return None
        peer = mine[1] if world.rank == mine[0] else mine[0]
        return MpiPair(world.comm, world.rank == mine[0], window, peer)


class MpiPair:
    """A rank pair over the world's MPI communicator, on host buffers, timed in native loops."""
    device = "cpu"

    def __init__(self, comm, first: bool, window: int, peer: int):
        self.comm, self.first, self.window, self.peer = comm, first, window, peer

    def times(self, test: str, send, recv, size: int, iters: int, loop: int = 1) -> np.ndarray:
        from .. import _host
        where = {"comm": self.comm.py2f(), "loop": loop, "peer": self.peer, "first": self.first}
        if test == "pingpong":
            return np.asarray(_host.pingpong_times(send, recv, bytes=size, iters=iters, **where))
        return np.asarray(_host.bandwidth_times(send, recv, bytes=size, window=self.window, iters=iters, **where))

    def close(self) -> None:
        """Nothing of its own to free: the communicator is the world's."""


MPI = MpiTransport()
