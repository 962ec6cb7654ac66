"""`commbench links`' measurement over MPI, NCCL or gloo with p2p's timers (p2p.PairTimers over the
transport's Pair): at rank level every rank pair's ping-pong latency and windowed bandwidth, one pair
at a time and then in rounds of disjoint pairs at once (links.schedule), judged by analysis/links.py;
at host level the rounds of analysis/host/level.py, judged by analysis/host/verdicts.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ..analysis.host.level import STAGES, Layout, confirm_rounds, first_rounds
from ..analysis.host.verdicts import Flow
from ..analysis.links import schedule
from ..launch import watchdog
from ..results.series import variant
from ..sizes import format_size
from .p2p import open_pairs, prepare_pairs


def run_links(world, cfg, latency_size: int, bandwidth_size: int, reporter) -> int:
    """Measures both schedules; returns the wrong bytes of the checks, on every rank."""
    prepare_pairs(world, cfg, "commbench links", peers=world.size - 1)
    tests = (("pingpong", latency_size), ("bandwidth", bandwidth_size))
    wrong = 0
    rounds = schedule(world.size)
    for sched, batches, where in (("clean", [[pair] for rnd in rounds for pair in rnd], "one pair at a time"),
                                  ("loaded", rounds, "all pairs of a round at once")):
        for pairs in batches:
            wrong += _round(world, cfg, sched, pairs, tests, where, reporter)[0]
    return world.bcast(wrong)


@dataclass(frozen=True)
class HostPlan:
    """What a host-level run measures: the ranks' layout, K matchings (None: every host pair) from
    `seed`, and the judgement the confirmation stage is drawn from."""
    layout: Layout
    rounds: Optional[int]
    seed: int
    threshold: float
    judged: tuple
    intra: bool = True


@dataclass
class HostRun:
    """What a host-level run has measured so far, on rank 0: its flows and the rounds run (kept where
    a failure midway can still judge them)."""
    flows: list = field(default_factory=list)
    rounds: list = field(default_factory=list)


def run_host_links(world, cfg, latency_size: int, bandwidth_size: int, reporter, plan: HostPlan, done: HostRun) -> int:
    """The first rounds (inside hosts, host matchings), then the confirmation rounds rank 0 draws from
    them, into `done` (flows on rank 0 only). Returns the wrong bytes on every rank."""
    prepare_pairs(world, cfg, "commbench links", peers=world.size - 1)
    tests = (("pingpong", latency_size), ("bandwidth", bandwidth_size))
    local = plan.layout.local()
    wrong, flows, ran, count = 0, done.flows, done.rounds, 0

    def measure(rounds) -> None:
        nonlocal wrong, count
        for rnd in rounds:
            w, got = _round(world, cfg, rnd.stage, rnd.pairs, tests, STAGES[rnd.stage], reporter, show=False,
                            both=rnd.both, number=count)
            wrong += w
            if reporter:
                ran.append(rnd)
                mine = []
                for (a, b), recs in got:
                    latency = recs[0].time_us["median"]
                    mine += [plan.layout.flow(rnd.stage, s, d, rec.algbw_gbps, latency, local, count)
                             for (s, d), rec in zip(((a, b), (b, a)), recs[1:])]
                flows.extend(mine)
                _round_line(len(ran), rnd, mine)
            count += 1

    measure(first_rounds(plan.layout, plan.rounds, plan.seed, plan.intra))
    measure(world.root_call(lambda: confirm_rounds(plan.layout, flows, plan.seed, plan.threshold, plan.judged)))
    return world.bcast(wrong)


def _round_line(n: int, rnd, flows: list[Flow]) -> None:
    import click
    bw = [f.bandwidth_gbps for f in flows] or [float("nan")]
    what = f"{len(rnd.hosts)} host pair(s), " if rnd.hosts else ""
    click.echo(f"# round {n} ({rnd.stage}): {what}{len(flows)} flow(s), bandwidth {min(bw):.3f}-{max(bw):.3f} GB/s "
               f"(median {float(np.median(bw)):.3f})")


def _round(world, cfg, sched: str, pairs, tests, where: str, reporter, show: bool = True, both: bool = False,
           number: Optional[int] = None) -> tuple[int, list]:
    """Every pair of `pairs` (disjoint) measured at once under schedule `sched`, and where `both` the
    bandwidth test again the other way (the second rank sending), after the first; rank 0 adds their
    rows (to stdout too where `show`), numbered `number` where given. Returns the wrong bytes and
    [((a, b), [record per test, the way back last])] on rank 0; 0 and [] elsewhere."""
    impl = cfg.impls[0]
    label = variant({"impl": impl, "schedule": sched})
    step = f"{label} {' '.join(f'{a}-{b}' for a, b in pairs)}" if show else f"{label} {len(pairs)} pairs"
    if reporter:
        reporter.step(step)
    # Every rank arms, those of no pair too: each waits for the round's end within --timeout.
    watchdog.arm(f"links {step}")
    ways = [(pairs, tests)]
    if both:
        ways.append(([(b, a) for a, b in pairs], [t for t in tests if t[0] == "bandwidth"]))
    rows, firsts = [], []
    for way, (opened, measured) in enumerate(ways):
        timers = open_pairs(world, cfg, opened, max(size for _, size in measured))
        for test, size in measured:
            watchdog.arm(f"links {step} {test} {format_size(size)}{' back' if way else ''}")
            if timers is not None:
                rows.append(timers.row(test, size, cfg.policy, impl, world.size))
            firsts.append(way)
            # The pairs of a round start each test together; the idle ranks wait here without
            # spinning on the cores the measured ranks use.
            world.quiet_barrier()
        if timers is not None:
            timers.close()
    got = world.gather(rows)
    if not reporter:
        return 0, []
    sizes = [size for _opened, measured in ways for _test, size in measured]
    numbered = {} if number is None else {"round": number}
    total, out, rows = 0, [], []
    for a, b in pairs:
        block = f"{label} {a}-{b}"
        if show:
            reporter.block(block, f"ping-pong latency and windowed bandwidth, {where}")
        recs = []
        for k, size in enumerate(sizes):
            first = (a, b)[firsts[k]]  # the rank that sent first holds the record
            rec = got[first][k][0].but(wrong=got[a][k][1] + got[b][k][1], schedule=sched, **numbered)
            total += rec.wrong
            recs.append(rec)
            rows.append((rec, block, format_size(size)))
            if show:  # a pair's table under its own header
                reporter.add_rows(rows, show)
                rows = []
        out.append(((a, b), recs))
    if rows:  # the round's rows in one write
        reporter.add_rows(rows, show)
    return total, out
