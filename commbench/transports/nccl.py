"""NCCL: the library's call for each collective and our algorithms over NCCL point-to-point, on
each rank's GPU, timed with CUDA events in native code (commbench._cuda)."""

from __future__ import annotations

from typing import Optional

import numpy as np


def communicator(world, timeout_s: Optional[float] = None):
    """This rank's NCCL communicator, created on first use on the GPU the rank takes (one GPU per
    rank); `timeout_s`, when given, bounds every later wait of it for its peers."""
    def make():
        import torch

        from ..node.gpu import DEFAULT_TIMEOUT_S, device_comm, rank_device
        world.device = rank_device(world)
        torch.cuda.set_device(world.device)
        return device_comm(world, world.device, timeout_s or DEFAULT_TIMEOUT_S)
    comm = world.attached("nccl", make)
    if timeout_s:
        comm.set_timeout(timeout_s)
    return comm


class NcclTransport:
    name = "nccl"
    p2p_device = "cuda"
    p2p_summary = "GPU buffers, native loops"

    def impls(self, coll, device: str) -> dict[str, str]:
        if device != "cuda":
            return {}
        return {"nccl": f"NCCL's {coll.title}",
                **{name: f"{text} over NCCL send/recv, reduction kernel" for name, text in coll.algorithms.items()}}

    def prepare(self, world, cfg) -> None:
        communicator(world, cfg.timeout_s)

    def times(self, world, coll, impl: str, send, recv, op: int, iters: int, cfg, agg: int,
              delay_s: float) -> np.ndarray:
        from .. import _cuda
        from . import native_call
        # NCCL's calls are fused into one group per iteration, ours run one after another.
        return communicator(world).collective_times(*native_call(_cuda, coll, impl), send, recv, op, cfg.root, iters,
                                                    cfg.chunk_bytes, cfg.graph, agg, delay_s).numpy()


NCCL = NcclTransport()
