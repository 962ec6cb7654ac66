"""Sweeps: for each impl and size, an exact untimed check, then warm-up and timed iterations."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

from . import machine
from .errors import CommbenchError
from .policy import Policy, measure
from .sizes import format_size
from .spec import COLLECTIVES, dtype_of, redop_code
from .stats import summarize
from .testdata import DeviceData, HostData
from .world import World

# Value the output buffer holds before an out-of-place check, so a missing copy shows as wrong.
_STALE = 77


@dataclass(frozen=True)
class RunConfig:
    op: str  # 'allreduce' or 'p2p'
    impls: tuple[str, ...]
    sizes: tuple[int, ...]
    dtype: str = "float32"
    redop: str = "sum"
    in_place: bool = False
    device: str = "cpu"  # 'cpu' or 'cuda'
    graph: bool = False  # GPU: replay each iteration from a CUDA graph
    chunk_bytes: int = 1 << 20  # tree pipeline chunk
    timeout_s: float = 300.0  # GPU: how long one timed call may wait for its peers
    window: int = 64  # p2p bandwidth: messages in flight
    pairs: tuple[tuple[int, int], ...] = field(default_factory=tuple)
    policy: Policy = Policy()

    def describe(self) -> dict:
        return {"op": self.op, "impls": list(self.impls), "sizes": list(self.sizes), "dtype": self.dtype,
                "redop": self.redop, "in_place": self.in_place, "device": self.device, "graph": self.graph,
                "chunk_bytes": self.chunk_bytes, "timeout_s": self.timeout_s,
                "window": self.window, "pairs": [list(p) for p in self.pairs],
                "policy": self.policy.describe()}


def record(op: str, impl: str, dtype: str, redop: str, ranks: int, size: int, count: int,
           samples_s: np.ndarray, wrong: int, moved: int = 1, **extra) -> dict:
    time_us = summarize(samples_s)
    algbw, busbw = COLLECTIVES[op].bandwidths(size, time_us["median"] * 1e-6, ranks, moved)
    return {"op": op, "impl": impl, "dtype": dtype, "redop": redop, "ranks": ranks, "size_bytes": size,
            "count": count, "iterations": int(len(samples_s)), "time_us": time_us, "algbw_gbps": algbw,
            "busbw_gbps": busbw, "wrong": int(wrong),
            "samples_us": [round(float(s) * 1e6, 4) for s in samples_s], **extra}


def check_memory(world: World, need_per_rank: int, what: str, device: str = "cpu") -> None:
    """Refuses up front a sweep whose largest buffers do not fit in free memory: the host's, shared
    by its ranks, or each rank's GPU. On a GPU, NCCL's own buffers come on top of ours, and the blocks
    torch holds cached but unused are free for our tensors."""
    if device == "cuda":
        from .gpu import nccl_reserve_bytes
        cached = torch.cuda.memory_reserved(world.device) - torch.cuda.memory_allocated(world.device)
        avail = torch.cuda.mem_get_info(world.device)[0] + cached
        need, where = need_per_rank + nccl_reserve_bytes(), f"GPU {world.device} (with NCCL's buffers)"
    else:
        avail, need = machine.meminfo_bytes("MemAvailable"), need_per_rank * world.local_size
        where = f"host {world.hosts[world.rank]} ({world.local_size} rank(s))"
    problem = None
    if avail and need > 0.9 * avail:
        problem = (f"{what} needs about {need / 2**30:.1f} GiB on {where} but {avail / 2**30:.1f} GiB is "
                   f"available; lower the largest --sizes or use fewer ranks per host")
    problems = world.gather(problem)
    first = world.bcast(next((p for p in problems if p), None) if world.rank == 0 else None)
    if first:
        raise CommbenchError(first)


def run_allreduce(world: World, cfg: RunConfig, impls: list, reporter) -> int:
    """Sweeps every impl over every size; returns the total count of wrong elements."""
    dtype = dtype_of(cfg.dtype)
    itemsize = torch.empty(0, dtype=dtype).element_size()
    code = redop_code(cfg.redop)
    if cfg.device == "cuda":
        data = DeviceData(world.device_comm(cfg.timeout_s))
        where = torch.device("cuda", world.device)
    else:
        data, where = HostData(world), torch.device("cpu")
    largest = max(cfg.sizes)
    check_memory(world, largest * (1 if cfg.in_place else 2) + largest // world.size + (4 << 20),
                 f"an all-reduce of {format_size(largest)}", cfg.device)
    total_wrong = 0
    for impl in impls:
        if reporter:
            reporter.block(impl.name, impl.description)
        for size in cfg.sizes:
            if reporter:
                reporter.step(f"{impl.name} {format_size(size)}")
            count = size // itemsize
            send = torch.empty(count, dtype=dtype, device=where)
            recv = send if cfg.in_place else torch.full((count,), _STALE, dtype=dtype, device=where)
            data.fill(send, code)
            if cfg.device == "cuda":
                torch.cuda.synchronize()  # torch.full ran on torch's stream, the impls use their own
            checked = impl.times(world, send, recv, code, 1, cfg)
            wrong = world.sum(data.count_wrong(recv, code))
            total_wrong += wrong
            samples = measure(lambda n: impl.times(world, send, recv, code, n, cfg), cfg.policy, first=checked)
            del send, recv
            if reporter:
                reporter.add(record("allreduce", impl.name, cfg.dtype, cfg.redop, world.size, size, count,
                                    samples, wrong, in_place=cfg.in_place), impl.name, format_size(size))
    return total_wrong


def resolve_pairs(spec: str, ranks: int) -> tuple[tuple[int, int], ...]:
    """'all' (every pair), or a list like '0:1,0:3'. Pairs are kept as (lower, higher): the lower
    rank sends first."""
    if ranks < 2:
        raise CommbenchError("p2p needs at least 2 ranks: use --np 2 or launch 2 ranks")
    if spec.strip() == "all":
        return tuple((a, b) for a in range(ranks) for b in range(a + 1, ranks))
    pairs = []
    for part in spec.split(","):
        try:
            a, b = (int(x) for x in part.split(":"))
        except ValueError:
            raise CommbenchError(f"bad pair '{part}' in --pairs: write A:B (e.g. 0:1), a list 0:1,0:2, or 'all'") from None
        if a == b or not (0 <= a < ranks and 0 <= b < ranks):
            raise CommbenchError(f"bad pair '{part}' in --pairs: two different ranks below {ranks}")
        pairs.append((min(a, b), max(a, b)))
    return tuple(dict.fromkeys(pairs))


def _byte_pattern(n: int) -> torch.Tensor:
    return ((torch.arange(n, dtype=torch.int64) * 7 + 3) % 251).to(torch.uint8)


P2P_TESTS = {
    "pingpong": "ping-pong, one-way latency = round trip / 2",
    "bandwidth": "windowed unidirectional bandwidth, time per message",
}


class _PairTimers:
    """Ping-pong and bandwidth loops of one rank pair: over MPI (host buffers, native loops), NCCL
    (GPU buffers, native loops) or gloo (host buffers, timed from Python like the gloo all-reduce)."""

    def __init__(self, world: World, impl: str, a: int, b: int, window: int, nbytes: int):
        self.window = window
        self.first = world.rank == a
        self.gloo = impl == "gloo"
        if self.gloo:
            self.dcomm = None
            self.peer = b if self.first else a
            self.buf = torch.empty(max(nbytes, 1), dtype=torch.uint8)
        elif impl == "nccl":
            self.dcomm = world.device_comm()
            self.peer = b if self.first else a
            self.buf = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=torch.device("cuda", world.device))
        else:
            self.dcomm = None
            # A two-rank communicator in which rank a is 0, so the native loops need no peer id.
            self.pair = world.comm.Split(0, 0 if self.first else 1)
            self.handle = self.pair.py2f()
            self.buf = torch.empty(max(nbytes, 1), dtype=torch.uint8)

    def __call__(self, test: str, size: int, iters: int) -> np.ndarray:
        from . import _host
        if self.gloo:
            return self._gloo(test, size, iters)
        if self.dcomm is not None:
            if test == "pingpong":
                return self.dcomm.pingpong_times(self.buf, size, self.peer, iters).numpy()
            return self.dcomm.bandwidth_times(self.buf, size, self.peer, self.window, iters).numpy() / self.window
        if test == "pingpong":
            return _host.pingpong_times(self.buf, size, iters, self.handle).numpy()
        return _host.bandwidth_times(self.buf, size, self.window, iters, self.handle).numpy() / self.window

    def _gloo(self, test: str, size: int, iters: int) -> np.ndarray:
        import time

        import torch.distributed as dist
        view, peer, t = self.buf[:size], self.peer, np.empty(iters)
        ack = torch.zeros(1, dtype=torch.uint8)
        for i in range(iters):
            t0 = time.perf_counter_ns()
            if test == "pingpong":
                for step in ((dist.send, dist.recv) if self.first else (dist.recv, dist.send)):
                    step(view, peer)
                t[i] = (time.perf_counter_ns() - t0) * 0.5e-9
            else:
                move = dist.isend if self.first else dist.irecv
                for work in [move(view, peer) for _ in range(self.window)]:
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
        pattern = _byte_pattern(size).to(self.buf.device)
        view = self.buf[:size]
        view.copy_(pattern) if self.first else view.zero_()
        if view.is_cuda:
            torch.cuda.synchronize()
        self("pingpong", size, 1)
        return 0 if self.first else int((view != pattern).sum())

    def close(self) -> None:
        if self.dcomm is None and not self.gloo:
            self.pair.Free()


def run_p2p(world: World, cfg: RunConfig, reporter) -> int:
    impl = cfg.impls[0]
    if impl == "mpi":
        world.require_mpi("commbench p2p")
    largest = max(cfg.sizes)
    if largest >= 2**31:
        raise CommbenchError(f"p2p sizes must stay below 2 GiB (got {format_size(largest)})")
    if impl == "nccl":
        world.device_comm(cfg.timeout_s)
    elif impl == "gloo":
        world.ensure_gloo()  # a collective: every rank joins, not only the pair's
    check_memory(world, largest + (4 << 20), f"a p2p message of {format_size(largest)}", cfg.device)
    total_wrong = 0
    for a, b in cfg.pairs:
        member = world.rank in (a, b)
        if impl == "mpi":
            # Every rank takes part in the split; the others get no communicator.
            from mpi4py import MPI
            if not member:
                world.comm.Split(MPI.UNDEFINED, 0)
        timers = _PairTimers(world, impl, a, b, cfg.window, largest) if member else None
        for test, description in P2P_TESTS.items():
            block = f"{impl} {test} {a}->{b}"
            if reporter:
                reporter.block(block, f"{impl.upper()} {description}")
            for size in cfg.sizes:
                if reporter:
                    reporter.step(f"{block} {format_size(size)}")
                rec: Optional[dict] = None
                wrong = 0
                if timers is not None:
                    wrong = timers.wrong(size)
                    samples = measure(lambda n: timers(test, size, n), cfg.policy)
                    if world.rank == a:
                        rec = record(test, impl, "uint8", "none", world.size, size, size, samples, 0,
                                     pair=[a, b], window=cfg.window if test == "bandwidth" else 1)
                got = world.gather((rec, wrong))
                if reporter:
                    rec = next(r for r, _ in got if r is not None)
                    rec["wrong"] = sum(w for _, w in got)
                    total_wrong += rec["wrong"]
                    reporter.add(rec, block, format_size(size))
        if timers is not None:
            timers.close()
    return world.bcast(total_wrong)
