"""The collective sweep: for each dtype, reduction, impl and size, an exact untimed check, then warm-up
and timed iterations; one record per size."""

from __future__ import annotations

import contextlib
import functools
from dataclasses import replace
from typing import Callable, Optional

import numpy as np

from ..collectives.base import STALE, UNTOUCHED
from ..collectives.dtypes import itemsize_of, redop_code
from ..launch import watchdog
from ..node.gpu import take_gpu
from ..results import arrival
from ..results.record import measured
from ..sizes import format_size
from .buffers import Buffers, allocator, check_device_memory
from .config import RunConfig
from .policy import measure, measure_loop
from .preflight import collective_bytes
from .testdata import DeviceData, HostData


class Timings:
    """The timer that measure() drives: the slowest rank's seconds per iteration, with every rank's
    own samples of the latest call kept for the record."""

    def __init__(self, rank_times: Callable[[int], np.ndarray]):
        self.rank_times = rank_times
        self.last: Optional[np.ndarray] = None

    def __call__(self, iters: int) -> np.ndarray:
        self.last = self.rank_times(iters)
        return self.last.max(axis=0)


class LoopTimings(Timings):
    """The timer that measure_loop() drives: each loop's seconds per call, averaged over the ranks as
    nccl-tests averages them (its -a 1), with every rank's own kept for the slowest."""

    def __call__(self, loops: int, calls: int) -> np.ndarray:
        self.last = self.rank_times(loops, loop=calls)
        return self.last.mean(axis=0)


# The pattern's op for collectives that do not reduce: any rank's values are exact in every dtype.
MOVE_ONLY = redop_code("max")


def fill_inputs(data, tensor, segments, code: int) -> None:
    for seg in segments:
        data.fill(tensor[seg.offset:seg.offset + seg.count], code, seg.first)


def count_wrong(data, tensor, segments, code: int, in_place: bool) -> int:
    """Wrong elements of `tensor` by the segments; an UNTOUCHED one in place holds this rank's input,
    a STALE one the stale value either way (the native checks' kUntouched)."""
    own = data.world.rank if in_place else UNTOUCHED
    sources = {UNTOUCHED: own, STALE: UNTOUCHED}
    return sum(data.count_wrong(tensor[seg.offset:seg.offset + seg.count], code, seg.first,
                                sources.get(seg.source, seg.source))
               for seg in segments)


def run_collective(world, cfg: RunConfig, coll, impls: list, reporter, where: str = "") -> int:
    """Sweeps every dtype and reduction of cfg (comma lists), every impl of `coll` and every size;
    returns the total count of wrong elements. `where` follows each block's name (the rank count,
    when one run measures several)."""
    dtypes, redops = cfg.dtype.split(","), cfg.redop.split(",") if coll.reduces else ["none"]
    if cfg.device == "cuda":
        take_gpu(world)
        data = DeviceData(world)
        allocate = allocator(world.device)
        if cfg.buffers == "cupy":
            from . import cupy_buffers
            allocate = lambda count, dt: cupy_buffers.empty(count, dt, world.device)  # noqa: E731
        largest_item = max(itemsize_of(d) for d in dtypes)
        # Commbench's algorithms and NCCL's calls of sends and receives reach other ranks: bounded by every one.
        p2p = coll.peer_to_peer or any(i != "nccl" for i in cfg.impls)
        check_device_memory(world, collective_bytes(coll, max(cfg.sizes), largest_item, world.size, cfg.placements),
                            f"{coll.title} of {format_size(max(cfg.sizes))}", p2p_peers=world.size - 1 if p2p else 0,
                            communicators=1 + len(cfg.nccl_variants))
    else:
        data, allocate = HostData(world), allocator()
    several = len(dtypes) * len(redops) > 1
    total_wrong = 0
    refused: dict[str, str] = {}  # a forced variant of NCCL's call NCCL refuses -> what NCCL said
    for dname in dtypes:
        itemsize = itemsize_of(dname)
        # One dtype's buffers at a time, as the memory check counts them: the last ones go first.
        pool = None
        pool = Buffers(coll, coll.shape(max(cfg.sizes), itemsize, world.size), dname, cfg.placements, allocate)
        for redop in redops:
            code = redop_code(redop) if coll.reduces else MOVE_ONLY
            for impl in impls:
                if impl.label in refused:
                    continue
                block = (f"{impl.label} {dname} {redop}" if several else impl.label) + where
                if reporter:
                    reporter.block(block, impl.description, impl.name)
                try:
                    for size in cfg.sizes:
                        shape = coll.shape(size, itemsize, world.size)
                        for in_place in cfg.placements:
                            total_wrong += _measure(world, cfg, coll, impl, reporter, data, pool, dname, redop, code,
                                                    shape, in_place, block)
                except RuntimeError as e:
                    # NCCL refuses the variant at its first call on every rank alike: the run goes on
                    # without it, and says so.
                    said = impl.refusal(e)
                    if said is None:
                        raise
                    refused[impl.label] = said
                    if reporter:
                        reporter.note(f"{impl.label}: NCCL refuses it: {said}")
                        reporter.attach("nccl_refused", dict(refused))
    return total_wrong


def _measure(world, cfg: RunConfig, coll, impl, reporter, data, pool: Buffers, dname: str, redop: str, code: int,
             shape, in_place: bool, block: str) -> int:
    """One size of one series in one placement: the exact untimed check, then the timed calls; adds
    the record and returns the wrong elements."""
    size_label = format_size(shape.size) + (" in place" if in_place and len(cfg.placements) > 1 else "")
    step = f"{block} {size_label}"
    watchdog.arm(f"{coll.name} {step}")
    if reporter:
        reporter.step(step)
    send, recv = pool.views(shape, world.rank, in_place)
    fill_inputs(data, send, coll.inputs(world.rank, world.size, cfg.root, shape), code)
    # One call, checked: in place, a second one would start from the first one's result. Without the
    # graph, whose making runs the call twice more on the same buffers; not gated, as the first call of
    # a size connects NCCL's peers on the host. NCCL's report of its choice: for this call alone, not
    # the timed ones, unless they are aggregated (below).
    with impl.choice_reported() if cfg.agg == 1 else contextlib.nullcontext():
        checked = Timings(functools.partial(impl.rank_times, world, coll, send, recv, code,
                                            cfg=replace(cfg, graph=False), gated=False))(1)
    expected = coll.expected(world.rank, world.size, cfg.root, shape)
    wrong = world.sum(count_wrong(data, recv, expected, code, in_place))
    if cfg.graph:
        # What the graph computes, checked as well (nccl-tests' -G checks a launch of its graph): on
        # buffers filled again, the call captured and launched once (no iterations: nothing timed).
        send, recv = pool.views(shape, world.rank, in_place)  # the receive buffer stale again
        fill_inputs(data, send, coll.inputs(world.rank, world.size, cfg.root, shape), code)
        impl.rank_times(world, coll, send, recv, code, 0, cfg=cfg, gated=False)
        wrong += world.sum(count_wrong(data, recv, expected, code, in_place))
    rank_times = functools.partial(impl.rank_times, world, coll, send, recv, code, cfg=cfg, agg=cfg.agg, delayed=True)
    grouped = None
    if cfg.agg > 1:
        # NCCL chooses an algorithm by the bytes of the whole group (its choice the timed calls run,
        # reported here) and may connect it on the host in its first call, which the single call's
        # check never made: that call, ungated, is the first warm-up.
        with impl.choice_reported():
            grouped = Timings(functools.partial(rank_times, gated=False))(1)
    if cfg.policy.timing == "loop":
        timings = LoopTimings(rank_times)
        samples, calls = measure_loop(timings, cfg.policy, cfg.agg)
    else:
        timings = Timings(rank_times)
        # The check is undelayed and without the graph: then the iteration count comes from a timed call.
        first = grouped if grouped is not None else checked if not cfg.delay and not cfg.graph else None
        samples = measure(timings, cfg.policy, first=first, ops=cfg.agg)
    if reporter:
        extra = {"root": cfg.root} if coll.rooted else {}
        extra.update(impl.fields)
        if cfg.agg > 1:
            extra["agg"] = cfg.agg
        choice = impl.choice(coll, shape.send * itemsize_of(dname), shape.recv * itemsize_of(dname))
        if choice:
            extra["nccl_choice"] = choice
        rec = measured(coll.name, impl.name, dname, redop, world.size, shape.size, shape.count, samples, wrong,
                       in_place=in_place, **extra)
        if cfg.policy.timing == "loop":
            # A loop has no per-iteration samples: no per-rank skew or straggler.
            rec = rec.but(timing="loop", loop_calls=calls,
                          rank_max_us=round(float(np.median(timings.last.max(axis=0))) * 1e6, 4))
        else:
            rec = rec.but(**arrival.figures(timings.last, world.hosts, rec.time_us["median"],
                                              reporter.clock_floor_s, same_work=not coll.rooted))
        reporter.add(rec, block, size_label)
    return wrong


def run_counts(world, cfg: RunConfig, coll, impls: list, counts, reporter) -> int:
    """The sweep at each rank count of `counts` in turn, on the first k ranks of the launch (World.subset)
    while the others wait without spinning; returns the wrong elements, on every rank."""
    wrong = 0
    for k in counts:
        sub = world.subset(k)
        if sub is not None:
            try:
                wrong += run_collective(sub, cfg, coll, impls, reporter, f" ({k} ranks)")
            finally:
                sub.close()
        world.quiet_barrier()
    return world.bcast(wrong)
