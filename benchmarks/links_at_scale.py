"""`commbench links --level host` at cluster scale, by simulation: the real scheduler, confirmation and
attribution (commbench/analysis/host_level.py) driven by a model of a cluster instead of measured flows.

The model: N hosts x G ranks, host k (from 1) named node<k, 4 digits> and, with --leaf-size L, under
leaf ceil(k / L) (leaf<i>, zero-padded to the width of the leaf count). Every flow runs at its class's
rate (inter-host: NDR 400 Gb/s in NCCL, about 48 GB/s a NIC; intra-host: 360 GB/s, NVLink 4's ring
busbw) times a uniform noise of +-5 %, times the smallest factor of the planted faults on its path:
  host:NAME[@F]            every inter-host flow of the host
  rail:NAME:LOCALRANK[@F]  the host's flows on that rail
  link:NAME:NAME[@F]       the flows between the two hosts
  switch:LEAF[@F]          every flow between a host below the leaf and a host below another
F is the fault's share of the healthy rate (default 0.3).

The measuring time is the rounds times a round's cost on a real fabric: a round runs two tests (the
8-byte ping-pong and the windowed bandwidth test), each at most its warm-up (half the budget) and its
timed budget under the default iteration policy (200 ms): 2 x 1.5 x 0.2 s = 0.6 s. Connection set-up
of new peers is not modelled (NCCL connects a new pair lazily, on its first send). Compute is this
process's wall time from the first round to the last verdict, the model included.

    .venv/bin/python benchmarks/links_at_scale.py --hosts N --ranks-per-host G [--leaf-size L]
        --plant SPEC[,SPEC...] [--seed S] [--rounds K] [--verdicts]
    .venv/bin/python benchmarks/links_at_scale.py --hosts N --ranks-per-host G --leaf-size L --mixes M [--seed S]

Last line: planted: ... | named: ... | rounds R | flows F | measuring S s | compute C s.
Exit status 0 when the named faults are exactly the planted ones, 1 otherwise, 2 on bad input.

--mixes M: M seeded mixes instead of --plant, seeds S to S + M - 1, each one fault of every kind planted
apart (different hosts, none below the faulty leaf; the host pair of the link one that the seed's
rounds measure: a fault of one pair alone shows only where the pair is measured), as a Markdown table
row each; exit 0 when every mix is named exactly.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from commbench.analysis.host_level import Layout, confirm_rounds, first_rounds, judge  # noqa: E402
from commbench.analysis.host_schedule import parse_rounds  # noqa: E402
from commbench.analysis.host_verdicts import Flow, named, verdict_lines  # noqa: E402
from commbench.errors import CommbenchError  # noqa: E402
from commbench.run.policy import Policy  # noqa: E402

INTER_GBPS = 48.0
INTRA_GBPS = 360.0
NOISE = 0.05
DEFAULT_FACTOR = 0.3
THRESHOLD = 0.75  # links' --threshold-pct default
TESTS_PER_ROUND = 2


def round_seconds() -> float:
    """A round's measuring time under the default policy: each test's warm-up (at most half its
    budget) and timed budget."""
    policy = Policy()
    return TESTS_PER_ROUND * 1.5 * policy.budget_ms / 1000


def cluster(n: int, g: int, leaf_size: int | None) -> Layout:
    names = [f"node{k:04d}" for k in range(1, n + 1)]
    hosts = [h for h in names for _ in range(g)]
    if not leaf_size:
        return Layout(hosts)
    count = math.ceil(n / leaf_size)
    width = len(str(count))
    return Layout(hosts, {h: f"leaf{math.ceil(k / leaf_size):0{width}d}" for k, h in enumerate(names, 1)})


def parse_plants(text: str, layout: Layout, g: int) -> dict[str, float]:
    """{spec without its factor: factor}; one error line for anything the cluster does not have."""
    hosts = set(layout.names())
    leaves = set((layout.leaf_of or {}).values())
    plants = {}
    for spec in filter(None, (s.strip() for s in text.split(","))):
        body, _, factor = spec.partition("@")
        try:
            f = float(factor) if factor else DEFAULT_FACTOR
        except ValueError:
            raise CommbenchError(f"--plant {spec}: the factor after @ must be a number") from None
        if not 0 <= f < 1:
            raise CommbenchError(f"--plant {spec}: the factor must be at least 0 and below 1")
        kind, *args = body.split(":")
        if not _fits(kind, args, hosts, leaves, g):
            raise CommbenchError(f"--plant {spec}: not a host:NAME, rail:NAME:LOCALRANK, link:NAME:NAME or switch:LEAF "
                                 "of this cluster (hosts node0001..., leaves with --leaf-size)")
        key = f"{kind}:{':'.join(sorted(args) if kind == 'link' else args)}"
        plants[key] = f
    return plants


def _fits(kind: str, args: list[str], hosts: set, leaves: set, g: int) -> bool:
    if kind == "host":
        return len(args) == 1 and args[0] in hosts
    if kind == "rail":
        return len(args) == 2 and args[0] in hosts and args[1].isdecimal() and int(args[1]) < g
    if kind == "link":
        return len(args) == 2 and args[0] != args[1] and set(args) <= hosts
    return kind == "switch" and len(args) == 1 and args[0] in leaves


class Model:
    """Flow rates of the modelled cluster with its planted faults."""

    def __init__(self, layout: Layout, plants: dict[str, float], seed: int):
        self.layout, self.rng = layout, random.Random(f"model {seed}")
        self.local = layout.local()
        self.host, self.rail, self.link, self.leaf = {}, {}, {}, {}
        for spec, f in plants.items():
            kind, *args = spec.split(":")
            if kind == "host":
                self.host[args[0]] = f
            elif kind == "rail":
                self.rail[(args[0], int(args[1]))] = f
            elif kind == "link":
                self.link[tuple(sorted(args))] = f
            else:
                self.leaf[args[0]] = f

    def factor(self, a: str, b: str, rail: int) -> float:
        f = min(self.host.get(a, 1), self.host.get(b, 1), self.rail.get((a, rail), 1), self.rail.get((b, rail), 1),
                self.link.get((a, b) if a < b else (b, a), 1))
        leaf_of = self.layout.leaf_of
        if leaf_of and leaf_of[a] != leaf_of[b]:
            f = min(f, self.leaf.get(leaf_of[a], 1), self.leaf.get(leaf_of[b], 1))
        return f

    def measure(self, rnd) -> list[Flow]:
        hosts, local, out = self.layout.hosts, self.local, []
        for a, b in rnd.pairs:
            ha, hb = hosts[a], hosts[b]
            rate = INTRA_GBPS if ha == hb else INTER_GBPS * self.factor(ha, hb, local[a])
            out.append(Flow(rnd.stage, ha, hb, local[a], local[b], rate * self.rng.uniform(1 - NOISE, 1 + NOISE)))
        return out


def simulate(n: int, g: int, leaf_size: int | None, plant: str, seed: int, rounds: int | None):
    layout = cluster(n, g, leaf_size)
    plants = parse_plants(plant, layout, g)
    start = time.perf_counter()
    model = Model(layout, plants, seed)
    judged = ("bandwidth_gbps",)
    first = first_rounds(layout, rounds, seed)
    flows = [f for rnd in first for f in model.measure(rnd)]
    confirm = confirm_rounds(layout, flows, seed, THRESHOLD, judged)
    flows += [f for rnd in confirm for f in model.measure(rnd)]
    result = judge(layout, flows, THRESHOLD, judged)
    compute = time.perf_counter() - start
    return plants, result, len(first) + len(confirm), len(flows), compute, first, confirm


def mix(n: int, g: int, leaf_size: int, seed: int) -> str:
    """One fault of each kind, apart, drawn from the seed."""
    layout = cluster(n, g, leaf_size)
    rng = random.Random(f"mix {seed}")
    leaf = rng.choice(sorted(set(layout.leaf_of.values())))
    free = [h for h in layout.names() if layout.leaf_of[h] != leaf]
    host, rail_host = rng.sample(free, 2)
    taken = {host, rail_host}
    from commbench.analysis.host_schedule import default_rounds
    measured = [p for r in first_rounds(layout, default_rounds(n, True), seed) for p in r.hosts
                if not taken & set(p) and leaf not in (layout.leaf_of[p[0]], layout.leaf_of[p[1]])]
    a, b = rng.choice(measured)
    return f"host:{host},rail:{rail_host}:{rng.randrange(g)},link:{a}:{b},switch:{leaf}"


def mixes(args) -> int:
    print("| hosts x ranks | leaves of | seed | planted | named exactly | rounds | flows | measuring (s) | compute (s) |")
    print("|---|---|---|---|---|---|---|---|---|")
    exact = True
    for seed in range(args.seed, args.seed + args.mixes):
        plant = mix(args.hosts, args.ranks_per_host, args.leaf_size, seed)
        plants, result, rounds, flows, compute, *_ = simulate(args.hosts, args.ranks_per_host, args.leaf_size, plant,
                                                              seed, default_k(args))
        ok = named(result["findings"]) == set(plants)
        exact &= ok
        print(f"| {args.hosts} x {args.ranks_per_host} | {args.leaf_size} | {seed} | {', '.join(sorted(plants))} | "
              f"{'yes' if ok else 'NO: ' + ', '.join(sorted(named(result['findings'])))} | {rounds} | {flows} | "
              f"{rounds * round_seconds():.1f} | {compute:.1f} |")
    return 0 if exact else 1


def default_k(args) -> int:
    from commbench.analysis.host_schedule import default_rounds
    return default_rounds(args.hosts, bool(args.leaf_size))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, required=True)
    ap.add_argument("--ranks-per-host", type=int, required=True)
    ap.add_argument("--leaf-size", type=int, default=None)
    ap.add_argument("--plant", default="")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", default=None, help="K, or 'all' (default: links' default for the cluster)")
    ap.add_argument("--verdicts", action="store_true", help="print every host's verdict line and the findings")
    ap.add_argument("--mixes", type=int, default=None, help="M seeded mixes of one fault of each kind (see above)")
    args = ap.parse_args()
    try:
        if args.hosts < 2 or args.ranks_per_host < 1 or (args.leaf_size is not None and args.leaf_size < 1):
            raise CommbenchError("--hosts must be at least 2, --ranks-per-host and --leaf-size at least 1")
        if args.mixes is not None:
            if args.mixes < 1 or not args.leaf_size or args.plant or args.rounds:
                raise CommbenchError("--mixes takes a count of at least 1, needs --leaf-size, and no --plant or --rounds")
            return mixes(args)
        k = parse_rounds(args.rounds) if args.rounds is not None else default_k(args)
        plants, result, rounds, flows, compute, first, confirm = simulate(
            args.hosts, args.ranks_per_host, args.leaf_size, args.plant, args.seed, k)
    except CommbenchError as e:
        print(f"links_at_scale: error: {e}", file=sys.stderr)
        return 2
    got = named(result["findings"])
    if args.verdicts:
        for line in verdict_lines(result["verdicts"]):
            print(line)
    stages = {s: sum(r.stage == s for r in first + confirm) for s in ("intra", "inter", "confirm")}
    print(f"# {args.hosts} hosts x {args.ranks_per_host} ranks{f' in leaves of {args.leaf_size}' if args.leaf_size else ''}, "
          f"seed {args.seed}: rounds {stages['intra']} intra + {stages['inter']} inter + {stages['confirm']} confirm; "
          f"a round {round_seconds():g} s")
    measured = {tuple(sorted(p)) for r in first + confirm for p in r.hosts}
    for spec in sorted(plants):
        kind, *ends = spec.split(":")
        if kind == "link" and tuple(ends) not in measured:
            # Only a schedule that pairs them can see a fault of one host pair alone.
            print(f"# {spec}: these rounds never pair the two hosts ({len(measured)} of "
                  f"{args.hosts * (args.hosts - 1) // 2} host pairs measured; --rounds all measures every one)")
    print(f"planted: {', '.join(sorted(plants)) or '-'} | named: {', '.join(sorted(got)) or '-'} | rounds {rounds} | "
          f"flows {flows} | measuring {rounds * round_seconds():.1f} s | compute {compute:.1f} s")
    return 0 if got == set(plants) else 1


if __name__ == "__main__":
    sys.exit(main())
