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
    chunk_bytes: int = 1 << 20  # tree pipeline chunk
    window: int = 64  # p2p bandwidth: messages in flight
    pairs: tuple[tuple[int, int], ...] = field(default_factory=tuple)
    policy: Policy = Policy()

    def describe(self) -> dict:
        return {"op": self.op, "impls": list(self.impls), "sizes": list(self.sizes), "dtype": self.dtype,
                "redop": self.redop, "in_place": self.in_place, "chunk_bytes": self.chunk_bytes,
                "window": self.window, "pairs": [list(p) for p in self.pairs],
                "policy": self.policy.describe()}


def record(op: str, impl: str, dtype: str, redop: str, ranks: int, size: int, count: int,
           samples_s: np.ndarray, wrong: int, **extra) -> dict:
    time_us = summarize(samples_s)
    algbw, busbw = COLLECTIVES[op].bandwidths(size, time_us["median"] * 1e-6,
                                              2 if op in ("pingpong", "bandwidth") else ranks)
    return {"op": op, "impl": impl, "dtype": dtype, "redop": redop, "ranks": ranks, "size_bytes": size,
            "count": count, "iterations": int(len(samples_s)), "time_us": time_us, "algbw_gbps": algbw,
            "busbw_gbps": busbw, "wrong": int(wrong),
            "samples_us": [round(float(s) * 1e6, 4) for s in samples_s], **extra}


def check_memory(world: World, need_per_rank: int, what: str) -> None:
    """Refuses up front a sweep whose largest buffers do not fit in this host's free memory."""
    avail = machine.meminfo_bytes("MemAvailable")
    need = need_per_rank * world.local_size
    problem = None
    if avail and need > 0.9 * avail:
        problem = (f"{what} needs about {need / 2**30:.1f} GiB on host {world.hosts[world.rank]} "
                   f"({world.local_size} rank(s)) but {avail / 2**30:.1f} GiB is available; "
                   f"lower the largest --sizes or use fewer ranks per host")
    problems = world.gather(problem)
    first = world.bcast(next((p for p in problems if p), None) if world.rank == 0 else None)
    if first:
        raise CommbenchError(first)


def run_allreduce(world: World, cfg: RunConfig, impls: list, reporter) -> int:
    """Sweeps every impl over every size; returns the total count of wrong elements."""
    from . import _host
    dtype = dtype_of(cfg.dtype)
    itemsize = torch.empty(0, dtype=dtype).element_size()
    code = redop_code(cfg.redop)
    largest = max(cfg.sizes)
    check_memory(world, largest * (1 if cfg.in_place else 2) + largest // world.size + (4 << 20),
                 f"an all-reduce of {format_size(largest)}")
    total_wrong = 0
    for impl in impls:
        impl.prepare(world)
        if reporter:
            reporter.block(impl.name, impl.description)
        for size in cfg.sizes:
            if reporter:
                reporter.step(f"{impl.name} {format_size(size)}")
            count = size // itemsize
            send = torch.empty(count, dtype=dtype)
            recv = send if cfg.in_place else torch.full((count,), _STALE, dtype=dtype)
            _host.fill_pattern(send, code, world.rank, world.size)
            checked = impl.times(world, send, recv, code, 1, cfg.chunk_bytes)
            wrong = world.sum(int(_host.count_wrong(recv, code, world.size)))
            total_wrong += wrong
            samples = measure(lambda n: impl.times(world, send, recv, code, n, cfg.chunk_bytes), cfg.policy,
                              first=checked)
            del send, recv
            if reporter:
                reporter.add(record("allreduce", impl.name, cfg.dtype, cfg.redop, world.size, size, count,
                                    samples, wrong, in_place=cfg.in_place), impl.name, format_size(size))
    return total_wrong


def resolve_pairs(spec: str, ranks: int) -> tuple[tuple[int, int], ...]:
    """'all' (every pair a < b), or a list like '0:1,0:3'."""
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
        pairs.append((a, b))
    return tuple(dict.fromkeys(pairs))


def _byte_pattern(n: int) -> np.ndarray:
    return ((np.arange(n, dtype=np.int64) * 7 + 3) % 251).astype(np.uint8)


def _p2p_wrong(pair_comm, buf: torch.Tensor, size: int) -> int:
    """Untimed exact check: the first rank of the pair sends a byte pattern, the second counts the
    bytes that arrive wrong."""
    view = buf.numpy()[:size]
    if pair_comm.rank == 0:
        view[:] = _byte_pattern(size)
        pair_comm.Send(view, dest=1)
        return 0
    view[:] = 0
    pair_comm.Recv(view, source=0)
    return int(np.count_nonzero(view != _byte_pattern(size)))


P2P_TESTS = {
    "pingpong": "MPI ping-pong, one-way latency = round trip / 2",
    "bandwidth": "MPI windowed unidirectional bandwidth, time per message",
}


def run_p2p(world: World, cfg: RunConfig, reporter) -> int:
    from mpi4py import MPI

    from . import _host
    world.require_mpi("commbench p2p")
    largest = max(cfg.sizes)
    if largest >= 2**31:
        raise CommbenchError(f"p2p sizes must stay below 2 GiB (got {format_size(largest)})")
    check_memory(world, largest + (4 << 20), f"a p2p message of {format_size(largest)}")
    total_wrong = 0
    for a, b in cfg.pairs:
        member = world.rank in (a, b)
        pair_comm = world.comm.Split(0 if member else MPI.UNDEFINED, 0 if world.rank == a else 1)
        buf = torch.empty(max(largest, 1), dtype=torch.uint8) if member else None
        for test, description in P2P_TESTS.items():
            block = f"mpi {test} {a}->{b}"
            if reporter:
                reporter.block(block, description)
            for size in cfg.sizes:
                if reporter:
                    reporter.step(f"{block} {format_size(size)}")
                rec: Optional[dict] = None
                if member:
                    wrong = pair_comm.allreduce(_p2p_wrong(pair_comm, buf, size))
                    handle = pair_comm.py2f()
                    if test == "pingpong":
                        samples = measure(lambda n: _host.pingpong_times(buf, size, n, handle), cfg.policy)
                    else:
                        window = cfg.window
                        samples = measure(lambda n: _host.bandwidth_times(buf, size, window, n, handle)
                                          / window, cfg.policy)
                    if world.rank == a:
                        rec = record(test, "mpi", "uint8", "none", world.size, size, size, samples, wrong,
                                     pair=[a, b], window=cfg.window if test == "bandwidth" else 1)
                got = world.gather(rec)
                if reporter:
                    rec = next(r for r in got if r is not None)
                    total_wrong += rec["wrong"]
                    reporter.add(rec, block, format_size(size))
        if member:
            pair_comm.Free()
    return world.bcast(total_wrong)
