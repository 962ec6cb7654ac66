"""gloo: torch.distributed's collectives on host buffers, timed per iteration from Python with a
monotonic nanosecond clock, so unlike the native impls each sample includes the Python call overhead
of torch.distributed (a few microseconds)."""

from __future__ import annotations

import time
from typing import Optional

import numpy as np

from ..launch.rendezvous import all_gather_flat, join
from .base import Transport


def as_tensor(buffer):
    """A torch view (no copy) of a host buffer: torch.distributed takes tensors, the sweeps' host
    buffers are NumPy arrays (run/buffers.py), whose bfloat16 (ml_dtypes) torch cannot view directly."""
    import torch
    if isinstance(buffer, torch.Tensor):
        return buffer
    if buffer.dtype.name == "bfloat16":
        return torch.from_numpy(buffer.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(buffer)


def _op(code: int):
    import torch.distributed as dist
    return (dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MAX, dist.ReduceOp.MIN)[code]


def _overlap(a, b) -> bool:
    start_a, start_b = a.data_ptr(), b.data_ptr()
    return start_a < start_b + b.nbytes and start_b < start_a + a.nbytes


def _allreduce(send, recv, op, root, world, in_place):
    import torch.distributed as dist
    if not in_place:
        recv.copy_(send)
    dist.all_reduce(recv, op=_op(op), group=world.group)


def _allgather(send, recv, op, root, world, in_place):
    all_gather_flat(recv, send, world.group)


def _broadcast(send, recv, op, root, world, in_place):
    import torch.distributed as dist
    if not in_place and world.rank == root:
        recv.copy_(send)
    dist.broadcast(recv, src=root, group=world.group)


# torch's reduce works in place on every rank's tensor and leaves partial results in the other ranks'
# ones; MPI's and NCCL's leave the other ranks' buffers as they were (nccl-tests checks that they do),
# so there gloo reduces a copy of the input, in working memory kept per dtype at the largest size.
_WORK: dict = {}


def _work_copy(src):
    import torch
    work = _WORK.get(src.dtype)
    if work is None or work.numel() < src.numel():
        work = _WORK[src.dtype] = torch.empty(src.numel(), dtype=src.dtype)
    view = work[:src.numel()]
    view.copy_(src)
    return view


def _reduce(send, recv, op, root, world, in_place):
    import torch.distributed as dist
    if world.rank != root:
        dist.reduce(_work_copy(send), dst=root, op=_op(op), group=world.group)
        return
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


class GlooTransport(Transport):
    name = "gloo"
    p2p_device = "cpu"
    p2p_summary = "host buffers, timed from Python; the default under torchrun"
    captures_graphs = False  # --graph: no stream of its own to capture

    def impls(self, coll, device: str) -> dict[Optional[str], str]:
        """torch.distributed's call (None: gloo runs none of our algorithms) -> what it is."""
        if device != "cpu" or coll.name not in CALLS:
            return {}
        return {None: f"torch.distributed {coll.title}, gloo backend (timed from Python)"}

    def prepare(self, world, cfg, what: str) -> None:
        join(world)  # a collective: every rank joins, members of a timed pair or not

    def times(self, world, coll, algorithm: Optional[str], send, recv, op: int, iters: int,
              cfg, agg: int, delay_s: float, loop: int = 1, gated: bool = True) -> np.ndarray:
        import torch.distributed as dist
        call = CALLS[coll.name]
        send, recv = as_tensor(send), as_tensor(recv)
        # In place, the views share one buffer (run/buffers.py), as the native loops tell it too.
        in_place = _overlap(send, recv)
        t = np.empty(iters, dtype=np.float64)
        for i in range(iters):
            dist.barrier(group=world.group)
            # --delay: a busy wait outside the timed interval, as the native loops spin (spin.h).
            until = time.perf_counter_ns() + delay_s * 1e9
            while time.perf_counter_ns() < until:
                pass
            t0 = time.perf_counter_ns()
            for _ in range(agg * loop):  # gloo has no groups: the calls run one after another
                call(send, recv, op, cfg.root, world, in_place)
            t[i] = (time.perf_counter_ns() - t0) * 1e-9 / (agg * loop)
        return t

    def open_pairs(self, world, pairs, window: int) -> Optional[GlooPair]:
        mine = next((pair for pair in pairs if world.rank in pair), None)
        return GlooPair(world, mine, window) if mine is not None else None


class GlooPair:
    """A rank pair over torch.distributed's send and receive, on host buffers, timed from Python."""
    device = "cpu"

    def __init__(self, world, pair, window: int):
        self.window = window
        self.first, self.peer = world.rank == pair[0], pair[1] if world.rank == pair[0] else pair[0]

    def times(self, test: str, send, recv, size: int, iters: int, loop: int = 1) -> np.ndarray:
        import torch
        import torch.distributed as dist
        out, into, peer, t = as_tensor(send[:size]), as_tensor(recv[:size]), self.peer, np.empty(iters)
        ack = torch.zeros(1, dtype=torch.uint8)
        for i in range(iters):
            t0 = time.perf_counter_ns()
            for _ in range(loop):
                if test == "pingpong":
                    for step, view in (((dist.send, out), (dist.recv, into)) if self.first else
                                       ((dist.recv, into), (dist.send, out))):
                        step(view, peer)
                else:
                    moves = [dist.isend(out, peer) if self.first else dist.irecv(into, peer) for _ in range(self.window)]
                    for work in moves:
                        work.wait()
                    (dist.recv if self.first else dist.send)(ack, peer)
            t[i] = (time.perf_counter_ns() - t0) * 1e-9 / (loop * (2 if test == "pingpong" else 1))
        # Both ranks of the pair end with the same samples: the larger of the two per iteration.
        mine, theirs = torch.from_numpy(t), torch.empty(iters, dtype=torch.float64)
        for step, tensor in (((dist.send, mine), (dist.recv, theirs)) if self.first else
                             ((dist.recv, theirs), (dist.send, mine))):
            step(tensor, peer)
        return np.maximum(t, theirs.numpy())

    def close(self) -> None:
        """The process group is the world's, closed with it."""


GLOO = GlooTransport()
