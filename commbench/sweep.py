"""Sweeps: for each impl and size, an exact untimed check, then warm-up and timed iterations."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

from . import stragglers
from . import watchdog
from .errors import CommbenchError
from .policy import Policy, measure
from .preflight import collective_bytes, memory_problem, p2p_bytes
from .sizes import format_size
from .spec import COLLECTIVES, dtype_of, itemsize_of, redop_code
from .stats import summarize
from .testdata import DeviceData, HostData
from .transports import gloo
from .transports.nccl import communicator
from .world import World

# Value the output buffer holds before an out-of-place check, so a missing copy shows as wrong.
_STALE = 77
_PAGE = 4096


@dataclass(frozen=True)
class RunConfig:
    op: str  # a registered collective, 'p2p' or 'copy'
    impls: tuple[str, ...]
    sizes: tuple[int, ...]
    dtype: str = "float32"
    redop: str = "sum"
    in_place: bool = False
    device: str = "cpu"  # 'cpu' or 'cuda'
    graph: bool = False  # GPU: replay each iteration from a CUDA graph
    chunk_bytes: int = 1 << 20  # tree pipeline chunk
    root: int = 0  # rooted collectives
    agg: int = 1  # calls per timed iteration (nccl-tests' -m)
    buffers: str = "torch"  # who allocates GPU buffers: torch, or cupy (--impl mpi)
    timeout_s: float = 300.0  # GPU: how long one timed call may wait for its peers
    window: int = 64  # p2p bandwidth: messages in flight
    pairs: tuple[tuple[int, int], ...] = field(default_factory=tuple)
    delay: Optional[tuple[int, float]] = None  # collectives: (rank, us) that rank waits before each timed iteration
    policy: Policy = Policy()

    def describe(self) -> dict:
        return {"op": self.op, "impls": list(self.impls), "sizes": list(self.sizes), "dtype": self.dtype,
                "redop": self.redop, "in_place": self.in_place, "device": self.device, "graph": self.graph,
                "chunk_bytes": self.chunk_bytes, "root": self.root, "agg": self.agg, "buffers": self.buffers, "timeout_s": self.timeout_s,
                "window": self.window, "pairs": [list(p) for p in self.pairs],
                "delay": {"rank": self.delay[0], "us": self.delay[1]} if self.delay else None,
                "policy": self.policy.describe()}


def record(op: str, impl: str, dtype: str, redop: str, ranks: int, size: int, count: int,
           samples_s: np.ndarray, wrong: int, moved: int = 1, **extra) -> dict:
    time_us = summarize(samples_s)
    algbw, busbw = COLLECTIVES[op].bandwidths(size, time_us["median"] * 1e-6, ranks, moved)
    return {"op": op, "impl": impl, "dtype": dtype, "redop": redop, "ranks": ranks, "size_bytes": size,
            "count": count, "iterations": int(len(samples_s)), "time_us": time_us, "algbw_gbps": algbw,
            "busbw_gbps": busbw, "wrong": int(wrong),
            "samples_us": [round(float(s) * 1e6, 4) for s in samples_s], **extra}


def check_device_memory(world: World, need_per_rank: int, what: str) -> None:
    """Refuses up front a sweep whose largest buffers do not fit in a rank's GPU, NCCL's own buffers
    on top of ours; the blocks torch holds cached but unused are free for our tensors. (The host's
    memory was checked before the ranks started, preflight.py; a GPU's is seen by its rank alone.)"""
    from .gpu import nccl_reserve_bytes
    cached = torch.cuda.memory_reserved(world.device) - torch.cuda.memory_allocated(world.device)
    avail = torch.cuda.mem_get_info(world.device)[0] + cached
    problem = memory_problem(what, need_per_rank + nccl_reserve_bytes(), avail, f"GPU {world.device} (with NCCL's buffers)")
    problems = world.gather(problem)
    first = world.bcast(next((p for p in problems if p), None) if world.rank == 0 else None)
    if first:
        raise CommbenchError(first)


# The pattern's op for collectives that do not reduce: any rank's values are exact in every dtype.
_MOVE_ONLY = redop_code("max")


def page_aligned(nbytes: int, device: torch.device) -> torch.Tensor:
    """A byte buffer that starts on a page boundary, as OSU allocates its message buffers."""
    raw = torch.empty(nbytes + _PAGE, dtype=torch.uint8, device=device)
    start = -raw.data_ptr() % _PAGE
    return raw[start:start + nbytes]


class Buffers:
    """A sweep's send and receive buffers, allocated once at the largest size: each size takes views
    of them, so a sweep faults its pages in once rather than at every size and impl. Views follow
    nccl-tests' layout: in place, one buffer with send and receive at the collective's offsets; out of
    place, two buffers, the receive one stale."""

    def __init__(self, coll, largest, dtype, in_place: bool, allocate):
        """`allocate(count, dtype)` makes a buffer; `largest` is the Shape of the largest size."""
        self.coll, self.in_place = coll, in_place
        if in_place:
            self.whole = allocate(max(largest.send, largest.recv), dtype)
        else:
            self.send, self.recv = allocate(largest.send, dtype), allocate(largest.recv, dtype)

    def views(self, shape, rank: int):
        """(send, recv) of one call; the stale values go where no input will overwrite them."""
        if self.in_place:
            so, ro = self.coll.places(rank, shape)
            whole = self.whole[:max(shape.send, shape.recv)].fill_(_STALE)
            return whole[so:so + shape.send], whole[ro:ro + shape.recv]
        return self.send[:shape.send], self.recv[:shape.recv].fill_(_STALE)


def torch_allocator(where: torch.device):
    """Buffers that start on a page boundary, as OSU and nccl-tests allocate theirs: where a buffer
    starts changes what the library's copies cost."""
    return lambda count, dtype: page_aligned(count * torch.empty(0, dtype=dtype).element_size(), where).view(dtype)


def _fill(data, tensor, segments, code: int) -> None:
    for seg in segments:
        data.fill(tensor[seg.offset:seg.offset + seg.count], code, seg.first)


def _count_wrong(data, tensor, segments, code: int) -> int:
    return sum(data.count_wrong(tensor[seg.offset:seg.offset + seg.count], code, seg.first, seg.source)
               for seg in segments)


def run_collective(world: World, cfg: RunConfig, coll, impls: list, reporter, where: str = "") -> int:
    """Sweeps every dtype and reduction of cfg (comma lists), every impl of `coll` and every size;
    returns the total count of wrong elements. `where` follows each block's name (the rank count,
    when one run measures several)."""
    dtypes, redops = cfg.dtype.split(","), cfg.redop.split(",") if coll.reduces else ["none"]
    if cfg.device == "cuda":
        data = DeviceData(communicator(world, cfg.timeout_s))
        allocate = torch_allocator(torch.device("cuda", world.device))
        if cfg.buffers == "cupy":
            from . import cupy_buffers
            allocate = lambda count, dt: cupy_buffers.empty(count, dt, world.device)  # noqa: E731
        largest_item = max(itemsize_of(d) for d in dtypes)
        check_device_memory(world, collective_bytes(coll, max(cfg.sizes), largest_item, world.size, cfg.in_place),
                            f"{coll.title} of {format_size(max(cfg.sizes))}")
    else:
        data, allocate = HostData(world), torch_allocator(torch.device("cpu"))
    several = len(dtypes) * len(redops) > 1
    total_wrong = 0
    for dname in dtypes:
        dtype = dtype_of(dname)
        itemsize = torch.empty(0, dtype=dtype).element_size()
        pool = Buffers(coll, coll.shape(max(cfg.sizes), itemsize, world.size), dtype, cfg.in_place, allocate)
        for redop in redops:
            code = redop_code(redop) if coll.reduces else _MOVE_ONLY
            for impl in impls:
                block = (f"{impl.name} {dname} {redop}" if several else impl.name) + where
                if reporter:
                    reporter.block(block, impl.description)
                for size in cfg.sizes:
                    shape = coll.shape(size, itemsize, world.size)
                    watchdog.arm(f"{coll.name} {block} {format_size(shape.size)}")
                    if reporter:
                        reporter.step(f"{block} {format_size(shape.size)}")
                    send, recv = pool.views(shape, world.rank)
                    _fill(data, send, coll.inputs(world.rank, world.size, cfg.root, shape), code)
                    if cfg.device == "cuda":
                        torch.cuda.synchronize()  # fill_ ran on torch's stream, the impls use their own
                    # One call, checked: in place, a second one would start from the first one's result.
                    checked = impl.times(world, coll, send, recv, code, 1, cfg)
                    expected = coll.expected(world.rank, world.size, cfg.root, shape)
                    wrong = world.sum(_count_wrong(data, recv, expected, code))
                    total_wrong += wrong
                    timings = stragglers.Timings(lambda n: impl.rank_times(world, coll, send, recv, code, n, cfg,
                                                                           cfg.agg, delayed=True))
                    # The check is undelayed: with --delay, the iteration count comes from a delayed call.
                    samples = measure(timings, cfg.policy, first=checked if cfg.agg == 1 and not cfg.delay else None)
                    if reporter:
                        extra = {"root": cfg.root} if coll.rooted else {}
                        if cfg.agg > 1:
                            extra["agg"] = cfg.agg
                        rec = record(coll.name, impl.name, dname, redop, world.size, shape.size, shape.count,
                                     samples, wrong, in_place=cfg.in_place, **extra)
                        rec.update(stragglers.figures(timings.last, world.hosts, rec["time_us"]["median"],
                                                      reporter.clock_floor_s, same_work=not coll.rooted))
                        reporter.add(rec, block, format_size(shape.size))
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
    (GPU buffers, native loops) or gloo (host buffers, timed from Python like the gloo all-reduce).
    Each rank sends from one page-aligned buffer and receives into another, as OSU and nccl-tests
    do."""

    def __init__(self, world: World, impl: str, a: int, b: int, window: int, nbytes: int, pair=None):
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
        from . import _host
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
        rec = record(test, impl, "uint8", "none", ranks, size, size, samples, 0, pair=self.ranks,
                     window=self.window if test == "bandwidth" else 1) if self.first else None
        return rec, wrong

    def close(self) -> None:
        if self.pair is not None:
            self.pair.Free()


def pair_comm(world: World, pairs) -> Optional[object]:
    """MPI: this rank's two-rank communicator among disjoint `pairs`, in which the pair's first rank
    is 0 so the native loops need no peer id; None on a rank in no pair. Collective over the world:
    one split gives every pair of a round its communicator at once."""
    from mpi4py import MPI
    mine = next((i for i, pair in enumerate(pairs) if world.rank in pair), None)
    if mine is None:
        world.comm.Split(MPI.UNDEFINED, 0)
        return None
    return world.comm.Split(mine, list(pairs[mine]).index(world.rank))


def prepare_pairs(world: World, cfg: RunConfig, command: str) -> None:
    """What every rank does before pairs of cfg's transport are timed, members of a pair or not."""
    impl, largest = cfg.impls[0], max(cfg.sizes)
    if impl == "mpi":
        world.require_mpi(command)
    if impl == "nccl":
        communicator(world, cfg.timeout_s)
        check_device_memory(world, p2p_bytes(largest), f"a p2p message of {format_size(largest)}")
    elif impl == "gloo":
        gloo.join(world)  # a collective: every rank joins, not only the pair's


def run_p2p(world: World, cfg: RunConfig, reporter) -> int:
    impl = cfg.impls[0]
    prepare_pairs(world, cfg, "commbench p2p")
    largest = max(cfg.sizes)
    total_wrong = 0
    for a, b in cfg.pairs:
        member = world.rank in (a, b)
        comm = pair_comm(world, [(a, b)]) if impl == "mpi" else None
        timers = _PairTimers(world, impl, a, b, cfg.window, largest, comm) if member else None
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
                    rec = next(r for r, _ in got if r is not None)
                    rec["wrong"] = sum(w for _, w in got)
                    total_wrong += rec["wrong"]
                    reporter.add(rec, block, format_size(size))
        if timers is not None:
            timers.close()
    return world.bcast(total_wrong)
