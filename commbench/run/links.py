"""`commbench links`' measurement: every rank pair's ping-pong latency and windowed bandwidth, one
pair at a time and then in rounds of disjoint pairs at once (links.schedule), over MPI, NCCL or gloo
with p2p's timers (p2p.PairTimers over the transport's Pair). The analysis is analysis/links.py's."""

from __future__ import annotations

from ..analysis.links import schedule
from ..launch import watchdog
from ..results.series import variant
from ..sizes import format_size
from .p2p import open_pairs, prepare_pairs


def run_links(world, cfg, latency_size: int, bandwidth_size: int, reporter) -> int:
    """Measures both schedules; returns the wrong bytes of the checks, on every rank."""
    prepare_pairs(world, cfg, "commbench links")
    tests = (("pingpong", latency_size), ("bandwidth", bandwidth_size))
    wrong = 0
    rounds = schedule(world.size)
    for sched, batches, where in (("clean", [[pair] for rnd in rounds for pair in rnd], "one pair at a time"),
                                  ("loaded", rounds, "all pairs of a round at once")):
        for pairs in batches:
            wrong += _round(world, cfg, sched, pairs, tests, where, reporter)
    return world.bcast(wrong)


def _round(world, cfg, sched: str, pairs, tests, where: str, reporter) -> int:
    """Every pair of `pairs` (disjoint) measured at once under schedule `sched`; rank 0 adds their
    rows. Returns the wrong bytes on rank 0, 0 elsewhere."""
    impl = cfg.impls[0]
    label = variant({"impl": impl, "schedule": sched})
    step = f"{label} {' '.join(f'{a}-{b}' for a, b in pairs)}"
    if reporter:
        reporter.step(step)
    # Every rank arms, those of no pair too: each waits for the round's end within --timeout.
    watchdog.arm(f"links {step}")
    timers = open_pairs(world, cfg, pairs, max(size for _, size in tests))
    rows = []
    for test, size in tests:
        watchdog.arm(f"links {step} {test} {format_size(size)}")
        if timers is not None:
            rows.append(timers.row(test, size, cfg.policy, impl, world.size))
        # The pairs of a round start each test together; the idle ranks wait here without
        # spinning on the cores the measured ranks use.
        world.quiet_barrier()
    if timers is not None:
        timers.close()
    got = world.gather(rows)
    if not reporter:
        return 0
    total = 0
    for a, b in pairs:
        block = f"{label} {a}-{b}"
        reporter.block(block, f"ping-pong latency and windowed bandwidth, {where}")
        for k, (_test, size) in enumerate(tests):
            rec = got[a][k][0].but(wrong=got[a][k][1] + got[b][k][1], schedule=sched)
            total += rec.wrong
            reporter.add(rec, block, format_size(size))
    return total
