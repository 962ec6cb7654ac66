"""gloo: torch.distributed's collectives on host buffers, timed per iteration from Python with a
monotonic nanosecond clock, so unlike the native impls each sample includes the Python call overhead
of torch.distributed (a few microseconds)."""

from __future__ import annotations

import time

import numpy as np

from ..launch.rendezvous import join


def _op(code: int):
    import torch.distributed as dist
    return (dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MAX, dist.ReduceOp.MIN)[code]


def _allreduce(send, recv, op, root, world, in_place):
    import torch.distributed as dist
    if not in_place:
        recv.copy_(send)
    dist.all_reduce(recv, op=_op(op), group=world.group)


def _allgather(send, recv, op, root, world, in_place):
    import torch.distributed as dist
    dist.all_gather_into_tensor(recv, send, group=world.group)


def _broadcast(send, recv, op, root, world, in_place):
    import torch.distributed as dist
    if not in_place and world.rank == root:
        recv.copy_(send)
    dist.broadcast(recv, src=root, group=world.group)


def _reduce(send, recv, op, root, world, in_place):
    import torch.distributed as dist
    if not in_place:
        recv.copy_(send)
    dist.reduce(recv, dst=root, op=_op(op), group=world.group)


def _alltoall(send, recv, op, root, world, in_place):
    import torch.distributed as dist
    dist.all_to_all_single(recv, send, group=world.group)


def _sendrecv(send, recv, op, root, world, in_place):
    import torch.distributed as dist
    if world.size == 1:  # gloo has no pair to itself; nccl-tests' one-rank send-recv is a copy
        recv.copy_(send)
        return
    right, left = (world.rank + 1) % world.size, (world.rank - 1) % world.size
    for work in (dist.isend(send, right, group=world.group), dist.irecv(recv, left, group=world.group)):
        work.wait()


# torch.distributed's gloo backend has no reduce-scatter.
CALLS = {"allreduce": _allreduce, "allgather": _allgather, "broadcast": _broadcast, "reduce": _reduce,
         "alltoall": _alltoall, "sendrecv": _sendrecv}


class GlooTransport:
    name = "gloo"
    p2p_device = "cpu"
    p2p_summary = "host buffers, timed from Python; the default under torchrun"

    def impls(self, coll, device: str) -> dict[str, str]:
        if device != "cpu" or coll.name not in CALLS:
            return {}
        return {"gloo": f"torch.distributed {coll.title}, gloo backend (timed from Python)"}

    def prepare(self, world, cfg) -> None:
        join(world)

    def times(self, world, coll, impl: str, send, recv, op: int, iters: int,
              cfg, agg: int, delay_s: float) -> np.ndarray:
        import torch.distributed as dist
        call = CALLS[coll.name]
        in_place = send.data_ptr() == recv.data_ptr() or cfg.in_place
        t = np.empty(iters, dtype=np.float64)
        for i in range(iters):
            dist.barrier(group=world.group)
            # --delay: a busy wait outside the timed interval, as the native loops spin (spin.h).
            until = time.perf_counter_ns() + delay_s * 1e9
            while time.perf_counter_ns() < until:
                pass
            t0 = time.perf_counter_ns()
            for _ in range(agg):  # gloo has no groups: the calls run one after another
                call(send, recv, op, cfg.root, world, in_place)
            t[i] = (time.perf_counter_ns() - t0) * 1e-9 / agg
        return t


GLOO = GlooTransport()
