"""GPU all-reduce from commbench._cuda: NCCL's own, and our ring and tree over NCCL send/recv.
Timed per iteration with CUDA events in native code."""

from __future__ import annotations

import numpy as np


class DeviceAllreduce:
    def __init__(self, name: str, description: str):
        self.name = name
        self.description = description

    def prepare(self, world, cfg) -> None:
        world.device_comm(cfg.timeout_s)

    def times(self, world, send, recv, redop: int, iters: int, cfg) -> np.ndarray:
        return world.device_comm().allreduce_times(self.name, send, recv, redop, iters, cfg.chunk_bytes,
                                                   cfg.graph).numpy()
