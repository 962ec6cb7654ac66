"""overlap: a collective beside a computation. For each size, the library's non-blocking call alone,
the computation alone, and both at once (the call started, the computation run, the call waited for),
as OSU's non-blocking collectives measure them; both results checked exactly. A record's time is the
whole overlapped iteration's (start to wait), and it carries how much of the collective the
computation hid (OSU's overlap percentage) and how much each slowed the other."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..collectives.dtypes import itemsize_of, redop_code
from ..errors import CommbenchError
from ..launch import watchdog
from ..results import arrival
from ..results.record import measured
from ..sizes import format_size
from . import collective
from .buffers import Buffers, allocator
from .collective import MOVE_ONLY, Timings, fill_inputs
from .config import RunConfig
from .policy import measure
from .testdata import HostData

# The computations, by --compute's kind: the device they run on and what they are. A CPU rank's
# computation shares the rank's core with the MPI library's progress, as OSU's does.
COMPUTE = {"loop": ("cpu", "sweeps of an add over two vectors in the core's caches, as many as the collective's time "
                           "alone takes (loop:N: N sweeps)")}

# Sweeps timed to learn one sweep's time, before the count that lasts as long as the collective is set.
TRIAL_SWEEPS = 256


@dataclass(frozen=True)
class Compute:
    """--compute KIND[:SIZE]: the kind, and for `loop` a fixed count of sweeps (None: calibrated)."""
    kind: str
    size: Optional[int] = None

    @staticmethod
    def parse(text: str, device: str) -> Compute:
        kind, _, size = text.partition(":")
        if kind not in COMPUTE:
            raise CommbenchError(f"unknown --compute '{text}': choose from {', '.join(COMPUTE)}")
        if COMPUTE[kind][0] != device:
            raise CommbenchError(f"--compute {kind} runs with --device {COMPUTE[kind][0]}, not --device {device}")
        if not size:
            return Compute(kind)
        if not (size.isascii() and size.isdigit()) or int(size) < 1 or len(size) > 12:
            raise CommbenchError(f"--compute {text}: the sweeps after '{kind}:' must be a whole number from 1")
        return Compute(kind, int(size))

    def describe(self) -> dict:
        return {"kind": self.kind, "size": self.size}


def default_compute(device: str) -> str:
    """--compute without a value: the first kind of the device."""
    kind = next((kind for kind, (where, _) in COMPUTE.items() if where == device), None)
    if kind is None:
        raise CommbenchError(f"overlap has no computation for --device {device} yet: choose from "
                             f"{', '.join(f'{k} (--device {w})' for k, (w, _) in COMPUTE.items())}")
    return kind


def _mean(ranks_s: np.ndarray) -> float:
    """OSU's figure: each rank's mean over the iterations, averaged over the ranks, in microseconds."""
    return float(np.mean(ranks_s)) * 1e6


def overlap_figures(comm_us: float, compute_us: float, total_us: float, compute_beside_us: float,
                    comm_beside_us: float) -> dict:
    """What a record says of the overlap, from the means: OSU's overlap percentage (the share of the
    collective's time alone that the overlapped iteration did not add beyond its computation:
    100 - (total - compute) / comm x 100, at least 0), and each side's slowdown beside the other."""
    overlap = max(0.0, 100.0 - (total_us - compute_beside_us) / comm_us * 100.0) if comm_us > 0 else 0.0
    return {"overlap_pct": round(overlap, 2),
            "slowdown_comm": round(comm_beside_us / comm_us, 4) if comm_us > 0 else None,
            "slowdown_compute": round(compute_beside_us / compute_us, 4) if compute_us > 0 else None}


def run_overlap(world, cfg: RunConfig, coll, impls: list, compute: Compute, probes: int, reporter) -> int:
    """Every dtype, reduction, impl and size of cfg, each beside the computation; returns the wrong
    elements of both sides, on every rank."""
    dtypes, redops = cfg.dtype.split(","), cfg.redop.split(",") if coll.reduces else ["none"]
    data, allocate = HostData(world), allocator()
    several = len(dtypes) * len(redops) > 1
    wrong = 0
    for dname in dtypes:
        itemsize = itemsize_of(dname)
        pool = Buffers(coll, coll.shape(max(cfg.sizes), itemsize, world.size), dname, cfg.placements, allocate)
        for redop in redops:
            code = redop_code(redop) if coll.reduces else MOVE_ONLY
            for impl in impls:
                block = f"{impl.label} {dname} {redop}" if several else impl.label
                if reporter:
                    reporter.block(block, f"{impl.description}, non-blocking, beside the computation", impl.name)
                for size in cfg.sizes:
                    shape = coll.shape(size, itemsize, world.size)
                    for in_place in cfg.placements:
                        wrong += _size(world, cfg, coll, impl, reporter, data, pool, dname, redop, code, shape, in_place,
                                       block, compute, probes)
    return wrong


def _size(world, cfg: RunConfig, coll, impl, reporter, data, pool: Buffers, dname: str, redop: str, code: int, shape,
          in_place: bool, block: str, compute: Compute, probes: int) -> int:
    """One size: checked once with the computation beside it, then the collective alone, the
    computation alone and both at once, each as many iterations as the collective alone was given."""
    from .. import _host
    size_label = format_size(shape.size) + (" in place" if in_place and len(cfg.placements) > 1 else "")
    watchdog.arm(f"overlap {coll.name} {block} {size_label}")
    if reporter:
        reporter.step(f"{block} {size_label}")
    send, recv = pool.views(shape, world.rank, in_place)

    def both(sweeps: int, iters: int):
        return impl.transport.overlap_times(world, coll, send, recv, code, iters, cfg, sweeps, probes)

    fill_inputs(data, send, coll.inputs(world.rank, world.size, cfg.root, shape), code)
    checked = both(1, 1)
    expected = coll.expected(world.rank, world.size, cfg.root, shape)
    wrong = world.sum(collective.count_wrong(data, recv, expected, code, in_place))
    compute_wrong = world.sum(checked.compute_wrong)
    # In place the check's result is the next call's input: filled again (the timed calls' results
    # are not checked, as in every sweep).
    fill_inputs(data, send, coll.inputs(world.rank, world.size, cfg.root, shape), code)

    alone = Timings(lambda iters: world.all_times(both(0, iters).total))
    samples = measure(alone, cfg.policy, ops=1)
    comm_ranks = alone.last
    iters = len(samples)
    comm_us = _mean(comm_ranks)
    sweeps = compute.size or _calibrated(world, comm_us)
    own, bad = _host.compute_times(sweeps=sweeps, iters=iters)
    compute_ranks = world.all_times(own)
    compute_wrong += world.sum(bad)
    beside = both(sweeps, iters)
    compute_wrong += world.sum(beside.compute_wrong)
    total, work, done = (world.all_times(getattr(beside, f)) for f in ("total", "compute", "done"))
    figures = overlap_figures(comm_us, _mean(compute_ranks), _mean(total), _mean(work), _mean(done))
    if reporter:
        extra = {"root": cfg.root} if coll.rooted else {}
        detail = {"compute": compute.kind, "sweeps": sweeps, "probes": probes, "comm_us": round(comm_us, 4),
                  "comm_beside_us": round(_mean(done), 4), "compute_us": round(_mean(compute_ranks), 4),
                  "compute_beside_us": round(_mean(work), 4), "total_us": round(_mean(total), 4),
                  "compute_wrong": compute_wrong}
        slowest = total.max(axis=0)
        rec = measured(coll.name, impl.name, dname, redop, world.size, shape.size, shape.count, slowest, wrong,
                       in_place=in_place, **extra, **figures, overlap=detail)
        rec = rec.but(**arrival.figures(total, world.hosts, rec.time_us["median"], reporter.clock_floor_s,
                                        same_work=not coll.rooted))
        reporter.add(rec, block, size_label)
    return wrong + compute_wrong


def _calibrated(world, comm_us: float) -> int:
    """The sweeps that last about as long as the collective alone on the slowest rank's core (OSU
    sets its computation's time to the collective's): a trial's time per sweep gives a count, whose
    own time corrects it once (a short trial reads the core's clock and caches as they were then);
    every rank runs the same count."""
    from .. import _host
    sweeps = TRIAL_SWEEPS
    for _ in range(2):
        own, _ = _host.compute_times(sweeps=sweeps, iters=3)
        per_sweep_us = float(np.median(own)) * 1e6 / sweeps
        slowest = float(world.all_times(np.array([per_sweep_us])).max())
        sweeps = max(1, math.ceil(comm_us / slowest)) if slowest > 0 else 1
    return sweeps
