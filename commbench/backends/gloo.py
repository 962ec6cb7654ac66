"""torch.distributed all-reduce on the gloo backend.

Timed per iteration from Python with a monotonic nanosecond clock, so unlike the native impls each
sample includes the Python call overhead of torch.distributed (a few microseconds).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from ..world import World


class GlooAllreduce:
    name = "gloo"
    description = "torch.distributed all_reduce, gloo backend (timed from Python)"

    def prepare(self, world: World, cfg) -> None:
        world.ensure_gloo()

    def times(self, world: World, send: torch.Tensor, recv: torch.Tensor, redop: int, iters: int,
              cfg) -> np.ndarray:
        import torch.distributed as dist
        op = (dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MAX, dist.ReduceOp.MIN)[redop]
        in_place = send.data_ptr() == recv.data_ptr()
        t = np.empty(iters, dtype=np.float64)
        for i in range(iters):
            dist.barrier()
            t0 = time.perf_counter_ns()
            if not in_place:
                recv.copy_(send)
            dist.all_reduce(recv, op=op)
            t[i] = (time.perf_counter_ns() - t0) * 1e-9
        slowest = torch.from_numpy(t)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        return slowest.numpy()
