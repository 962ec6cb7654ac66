"""NCCL: the library's call for each collective and our algorithms over NCCL point-to-point, on
each rank's GPU, timed with CUDA events in native code (commbench._cuda)."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..collectives.impls import ALGORITHM_TRANSPORT


def communicator(world, timeout_s: Optional[float] = None):
    """This rank's NCCL communicator, created on first use on the GPU the rank takes (one GPU per
    rank); `timeout_s`, when given, bounds every later wait of it for its peers."""
    def make():
        from ..launch import watchdog
        from ..node.gpu import DEFAULT_TIMEOUT_S, device_comm, take_gpu
        # The initialisation waits for every peer: it must end within --timeout like any size.
        watchdog.arm("NCCL initialisation")
        return device_comm(world, take_gpu(world), timeout_s or DEFAULT_TIMEOUT_S)
    comm = world.attached("nccl", make)
    if timeout_s:
        comm.set_timeout(timeout_s)
    return comm


class NcclTransport:
    name = "nccl"
    p2p_device = "cuda"
    p2p_summary = "GPU buffers, native loops"

    def impls(self, coll, device: str) -> dict[Optional[str], str]:
        """Our algorithm (None: NCCL's call) -> what it is."""
        if ALGORITHM_TRANSPORT[device] != self.name:
            return {}
        return {None: f"NCCL's {coll.title}",
                **{name: f"{text} over NCCL send/recv, reduction kernel" for name, text in coll.algorithms.items()}}

    def prepare(self, world, cfg, what: str) -> None:
        communicator(world, cfg.timeout_s)

    def times(self, world, coll, algorithm: Optional[str], send, recv, op: int, iters: int, cfg, agg: int,
              delay_s: float) -> np.ndarray:
        # NCCL's calls are fused into one group per iteration, ours run one after another.
        from ..node.gpu import cuda_module
        _cuda = cuda_module()
        from .native import native_call
        return np.asarray(communicator(world).collective_times(*native_call(_cuda, coll, algorithm), send, recv, op,
                                                               cfg.root, iters, cfg.chunk_bytes, cfg.graph, agg, delay_s))

    def open_pairs(self, world, pairs, window: int) -> Optional[NcclPair]:
        mine = next((pair for pair in pairs if world.rank in pair), None)
        return NcclPair(world, mine, window) if mine is not None else None


class NcclPair:
    """A rank pair over the rank's NCCL communicator, on GPU buffers, timed in native loops."""

    def __init__(self, world, pair, window: int):
        self.comm, self.window = communicator(world), window
        self.first, self.peer = world.rank == pair[0], pair[1] if world.rank == pair[0] else pair[0]
        self.device = f"cuda:{world.device}"

    def times(self, test: str, send, recv, size: int, iters: int) -> np.ndarray:
        if test == "pingpong":
            return np.asarray(self.comm.pingpong_times(send, recv, size, self.peer, iters))
        return np.asarray(self.comm.bandwidth_times(send, recv, size, self.peer, self.window, iters)) / self.window

    def close(self) -> None:
        """The communicator is the world's, closed with it."""


NCCL = NcclTransport()
