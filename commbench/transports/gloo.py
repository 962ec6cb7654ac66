"""gloo: torch.distributed's collectives on host buffers, timed per iteration from Python with a
monotonic nanosecond clock, so unlike the native impls each sample includes the Python call overhead
of torch.distributed (a few microseconds)."""

from __future__ import annotations

import datetime
import os
import socket
import time

import numpy as np

from ..errors import CommbenchError
from ..gpu import DEFAULT_TIMEOUT_S

# gloo's own bound on a wait; the watchdog (--timeout) ends a stalled run first.
_TIMEOUT = datetime.timedelta(seconds=DEFAULT_TIMEOUT_S)


class _ProcessGroup:
    def close(self) -> None:
        import torch.distributed as dist
        dist.destroy_process_group()


def join(world) -> None:
    """The torch.distributed gloo group over all ranks, created on first use. Under MPI, rank 0 opens
    the rendezvous store on its own address and publishes it, so this works across hosts too. A
    world of some of the ranks (World.subset) already has its group."""
    if world.group is not None:
        return
    world.attached("gloo", lambda: _open(world))


def _open(world) -> _ProcessGroup:
    import torch.distributed as dist
    if world.launcher == "torchrun":
        dist.init_process_group("gloo", timeout=_TIMEOUT)
        return _ProcessGroup()
    addr = world.root_call(lambda: _rendezvous_address(world.hosts))
    store = None
    if world.rank == 0:
        # wait_for_workers=False: the workers can only connect once the port is published.
        store = dist.TCPStore(addr, 0, world.size, True, timeout=_TIMEOUT, wait_for_workers=False)
    port = world.bcast(store.port if world.rank == 0 else None)
    if world.rank != 0:
        store = dist.TCPStore(addr, port, world.size, False, timeout=_TIMEOUT)
    dist.init_process_group("gloo", store=store, rank=world.rank, world_size=world.size, timeout=_TIMEOUT)
    return _ProcessGroup()


def _rendezvous_address(hosts: list[str]) -> str:
    """Where rank 0 listens: COMMBENCH_MASTER_ADDR if set, loopback when all ranks share this host,
    else this host's resolvable address."""
    if os.environ.get("COMMBENCH_MASTER_ADDR"):
        return os.environ["COMMBENCH_MASTER_ADDR"]
    if len(set(hosts)) == 1:
        return "127.0.0.1"
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError as e:
        raise CommbenchError(f"cannot resolve this host's address for the gloo rendezvous ({e}); "
                             f"set COMMBENCH_MASTER_ADDR to an address the other hosts can reach") from None


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
