"""Point-to-point: ping-pong latency and windowed bandwidth between pairs of ranks, each size checked
byte for byte before it is timed."""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ..launch import watchdog
from ..results.record import measured
from ..sizes import format_size
from ..transports import gloo
from ..transports.nccl import communicator
from .buffers import check_device_memory, page_aligned
from .config import RunConfig
from .policy import Policy, measure
from .preflight import p2p_bytes


def _byte_pattern(n: int) -> torch.Tensor:
    return ((torch.arange(n, dtype=torch.int64) * 7 + 3) % 251).to(torch.uint8)


P2P_TESTS = {
    "pingpong": "ping-pong, one-way latency = round trip / 2",
    "bandwidth": "windowed unidirectional bandwidth, time per message",
}


class PairTimers:
    """Ping-pong and bandwidth loops of one rank pair: over MPI (host buffers, native loops), NCCL
    (GPU buffers, native loops) or gloo (host buffers, timed from Python like the gloo all-reduce).
    Each rank sends from one page-aligned buffer and receives into another, as OSU and nccl-tests
    do."""

    def __init__(self, world, impl: str, a: int, b: int, window: int, nbytes: int, pair=None):
        """`pair`: MPI's two-rank communicator of a and b (pair_comm), which close() frees; NCCL and
        gloo address the peer by its rank in `world`."""
        self.window, self.ranks = window, [a, b]
        self.first = world.rank == a
        self.gloo = impl == "gloo"
        self.dcomm = communicator(world) if impl == "nccl" else None
        where = torch.device("cuda", world.device) if self.dcomm is not None else torch.device("cpu")
        self.send, self.recv = page_aligned(max(nbytes, 1), where), page_aligned(max(nbytes, 1), where)
        self.peer = b if self.first else a
        self.pair = pair
        self.handle = pair.py2f() if pair is not None else None

    def __call__(self, test: str, size: int, iters: int) -> np.ndarray:
        from .. import _host
        if self.gloo:
            return self._gloo(test, size, iters)
        if self.dcomm is not None:
            if test == "pingpong":
                return self.dcomm.pingpong_times(self.send, self.recv, size, self.peer, iters).numpy()
            return self.dcomm.bandwidth_times(self.send, self.recv, size, self.peer, self.window, iters).numpy() / self.window
        if test == "pingpong":
            return _host.pingpong_times(self.send, self.recv, size, iters, self.handle).numpy()
        return _host.bandwidth_times(self.send, self.recv, size, self.window, iters, self.handle).numpy() / self.window

    def _gloo(self, test: str, size: int, iters: int) -> np.ndarray:
        import time

        import torch.distributed as dist
        out, into, peer, t = self.send[:size], self.recv[:size], self.peer, np.empty(iters)
        ack = torch.zeros(1, dtype=torch.uint8)
        for i in range(iters):
            t0 = time.perf_counter_ns()
            if test == "pingpong":
                for step, view in (((dist.send, out), (dist.recv, into)) if self.first else
                                   ((dist.recv, into), (dist.send, out))):
                    step(view, peer)
                t[i] = (time.perf_counter_ns() - t0) * 0.5e-9
            else:
                moves = [dist.isend(out, peer) if self.first else dist.irecv(into, peer) for _ in range(self.window)]
                for work in moves:
                    work.wait()
                (dist.recv if self.first else dist.send)(ack, peer)
                t[i] = (time.perf_counter_ns() - t0) * 1e-9 / self.window
        # Both ranks of the pair end with the same samples: the larger of the two per iteration.
        mine, theirs = torch.from_numpy(t), torch.empty(iters, dtype=torch.float64)
        for step, tensor in (((dist.send, mine), (dist.recv, theirs)) if self.first else
                             ((dist.recv, theirs), (dist.send, mine))):
            step(tensor, peer)
        return np.maximum(t, theirs.numpy())

    def wrong(self, size: int) -> int:
        """Untimed exact check: the first rank sends a byte pattern in one ping-pong; the second
        counts the bytes that arrived wrong."""
        pattern = _byte_pattern(size).to(self.send.device)
        self.send[:size].copy_(pattern) if self.first else self.recv[:size].zero_()
        if self.send.is_cuda:
            torch.cuda.synchronize()
        self("pingpong", size, 1)
        return 0 if self.first else int((self.recv[:size] != pattern).sum())

    def row(self, test: str, size: int, policy: Policy, impl: str, ranks: int) -> tuple[Optional[dict], int]:
        """One test at one size, checked then timed: (the pair's row on its first rank, None on the
        other; the bytes this rank's check found wrong, which the caller adds into the row)."""
        wrong = self.wrong(size)
        samples = measure(lambda n: self(test, size, n), policy)
        rec = measured(test, impl, "uint8", "none", ranks, size, size, samples, 0, pair=self.ranks,
                     window=self.window if test == "bandwidth" else 1) if self.first else None
        return rec, wrong

    def close(self) -> None:
        if self.pair is not None:
            self.pair.Free()


def pair_comm(world, pairs) -> Optional[object]:
    """MPI: this rank's two-rank communicator among disjoint `pairs`, in which the pair's first rank
    is 0 so the native loops need no peer id; None on a rank in no pair. Collective over the world:
    one split gives every pair of a round its communicator at once."""
    from mpi4py import MPI
    mine = next((i for i, pair in enumerate(pairs) if world.rank in pair), None)
    if mine is None:
        world.comm.Split(MPI.UNDEFINED, 0)
        return None
    return world.comm.Split(mine, list(pairs[mine]).index(world.rank))


def prepare_pairs(world, cfg: RunConfig, command: str) -> None:
    """What every rank does before pairs of cfg's transport are timed, members of a pair or not."""
    impl, largest = cfg.impls[0], max(cfg.sizes)
    if impl == "mpi":
        world.require_mpi(command)
    if impl == "nccl":
        communicator(world, cfg.timeout_s)
        check_device_memory(world, p2p_bytes(largest), f"a p2p message of {format_size(largest)}")
    elif impl == "gloo":
        gloo.join(world)  # a collective: every rank joins, not only the pair's


def run_p2p(world, cfg: RunConfig, reporter) -> int:
    impl = cfg.impls[0]
    prepare_pairs(world, cfg, "commbench p2p")
    largest = max(cfg.sizes)
    total_wrong = 0
    for a, b in cfg.pairs:
        member = world.rank in (a, b)
        comm = pair_comm(world, [(a, b)]) if impl == "mpi" else None
        timers = PairTimers(world, impl, a, b, cfg.window, largest, comm) if member else None
        for test, description in P2P_TESTS.items():
            block = f"{impl} {test} {a}->{b}"
            if reporter:
                reporter.block(block, f"{impl.upper()} {description}")
            for size in cfg.sizes:
                watchdog.arm(f"p2p {block} {format_size(size)}")
                if reporter:
                    reporter.step(f"{block} {format_size(size)}")
                rec, wrong = timers.row(test, size, cfg.policy, impl, world.size) if timers is not None else (None, 0)
                got = world.gather((rec, wrong))
                if reporter:
                    rec = next(r for r, _ in got if r is not None).but(wrong=sum(w for _, w in got))
                    total_wrong += rec.wrong
                    reporter.add(rec, block, format_size(size))
        if timers is not None:
            timers.close()
    return world.bcast(total_wrong)
