"""`commbench links --level host` at cluster scale, by simulation: the real scheduler, confirmation and
attribution (commbench/analysis/host/level.py) driven by a model of a cluster instead of measured flows.

The cluster: N hosts x G ranks, host k (from 1) named node<k, 4 digits> and, with --leaf-size L, under
leaf ceil(k / L) (leaf<i>, zero-padded to the width of the leaf count).

The fabric, which is not clean: a flow between hosts runs at NDR 400 Gb/s in NCCL (about 48 GB/s a NIC)
times a lognormal noise of sigma --noise (drawn for every flow of every round), a flow inside a host at
360 GB/s (NVLink 4's ring busbw) times a lognormal of sigma --intra-noise. With --ecmp P, a round whose
cross-leaf flows are all of its flows (a host pair each for every two ranks) has P of them collide on a
spine uplink and run at half rate, a lighter round in proportion to its cross-leaf flows; drawn afresh
every round. With --mild M, a share M of the hosts (drawn from the seed) run at 0.88 of the rate: worn
but within spec, they must PASS. A flow then runs at the smallest factor of the faults on its path:
  host:NAME[@F]             every flow between the host and another
  rail:NAME:LOCALRANK[@F]   the host's flows on that rail, both ways
  rx:NAME:LOCALRANK[@F]     the rail where the host receives
  tx:NAME:LOCALRANK[@F]     the rail where the host sends
  link:NAME:NAME[@F]        the flows between the two hosts
  switch:LEAF[@F]           every flow between a host below the leaf and a host below another
  uplink:LEAF[@F]           one of the leaf's --uplinks U (default 8) degraded: each cross-leaf flow of
                            the leaf lands on it with probability 1/U, drawn afresh every round; with
                            --hash connection, each connection (host pair and rail) once for the run,
                            both ways, as a TCP connection or an RDMA queue pair keeps its ECMP path
F is the fault's share of the healthy rate (default 0.3).

--model FILE replaces the built-in fabric: a Python file that defines `rate(flow, rng) -> float` (GB/s)
and `PLANTED`, a list of specs in --plant's syntax that the last line compares the named faults with.
`flow` has src_host, dst_host, src_local, dst_local, src_leaf, dst_leaf (None without --leaf-size),
stage (intra, inter or confirm), round (from 0) and load (the round's cross-leaf flows over its most);
`rng` is a random.Random drawn from the seed. benchmarks/fabric_model.py is an example.

The measuring time is the rounds times a round's cost on a real fabric: a round runs the 8-byte ping-pong
and the windowed bandwidth test (between hosts both ways, one after the other), each at most its warm-up
(half the budget) and its timed budget under the default iteration policy (200 ms): 1.5 x 0.2 s a test.
Connection set-up of new peers is not modelled (NCCL connects a new pair lazily, on its first send).
Compute is this process's wall time from the first round to the last verdict, the model included.

    .venv/bin/python benchmarks/links_at_scale.py --hosts N --ranks-per-host G [--leaf-size L]
        [--plant SPEC[,SPEC...] | --model FILE] [--noise S] [--intra-noise S] [--ecmp P] [--mild M]
        [--uplinks U] [--hash round|connection] [--seed S] [--rounds K] [--verdicts]
    .venv/bin/python benchmarks/links_at_scale.py --hosts N --ranks-per-host G --leaf-size L --mixes M [fabric]
    .venv/bin/python benchmarks/links_at_scale.py --hosts N --ranks-per-host G --leaf-size L --mixes M --grid [--mild M]
        [--grid-noise 3,5,8] [--grid-ecmp 0,5,10]

Last line: planted: ... | named: ... | rounds R | flows F | measuring S s | compute C s.
Exit status 0 when the named faults are exactly the planted ones, 1 otherwise, 2 on bad input.

--mixes M: M seeded mixes instead of --plant, seeds S to S + M - 1, each one fault of every kind that a
model plants, apart (different hosts, none below the faulty leaves; the host pair of the link one that the
seed's rounds measure: a fault of one pair alone shows only where the pair is measured), a Markdown row
each, then the cell's line: runs, runs named exactly, healthy hosts FAILed, faults missed, the most
rounds, measuring and compute; exit 0 when every mix is named exactly. With --grid, one row per cell of
--grid-noise (default 3,5,8 %) x --grid-ecmp (default 0,5,10 %) instead, --mixes runs each.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import random
import runpy
import sys
import time
from dataclasses import dataclass
from typing import Callable, Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from commbench.analysis.host.level import Layout, Round, confirm_rounds, first_rounds, judge, plan  # noqa: E402
from commbench.analysis.host.schedule import default_rounds  # noqa: E402
from commbench.analysis.host.verdicts import Flow  # noqa: E402
from commbench.cli.links import parse_rounds  # noqa: E402
from commbench.errors import CommbenchError  # noqa: E402
from commbench.results.findings import named, planted_kinds, verdict_lines  # noqa: E402
from commbench.run.policy import Policy  # noqa: E402

INTER_GBPS = 48.0
INTRA_GBPS = 360.0
NOISE = 0.05
INTRA_NOISE = 0.02
MILD = 0.88
UPLINKS = 8
DEFAULT_FACTOR = 0.3
THRESHOLD = 0.75  # links' --threshold-pct default
# The grid the judgement is held to (noise x ecmp, in %); docs/commands/links.md carries it past these.
GRID_NOISE = "3,5,8"
GRID_ECMP = "0,5,10"


def test_seconds() -> float:
    """One test's measuring time under the default policy: its warm-up (at most half its budget) and
    its timed budget."""
    return 1.5 * Policy().budget_ms / 1000


def round_seconds(rnd: Round) -> float:
    """The ping-pong and the bandwidth test, the latter both ways between hosts."""
    return (3 if rnd.both else 2) * test_seconds()


def cluster(n: int, g: int, leaf_size: int | None) -> Layout:
    names = [f"node{k:04d}" for k in range(1, n + 1)]
    hosts = [h for h in names for _ in range(g)]
    if not leaf_size:
        return Layout(hosts)
    count = math.ceil(n / leaf_size)
    width = len(str(count))
    return Layout(hosts, {h: f"leaf{math.ceil(k / leaf_size):0{width}d}" for k, h in enumerate(names, 1)})


def parse_plants(specs: list[str], layout: Layout, g: int, where: str = "--plant") -> dict[str, float]:
    """{spec without its factor: factor}; one error line for anything the cluster does not have."""
    hosts = set(layout.names())
    leaves = set((layout.leaf_of or {}).values())
    plants = {}
    for spec in filter(None, (str(s).strip() for s in specs)):
        body, _, factor = spec.partition("@")
        try:
            f = float(factor) if factor else DEFAULT_FACTOR
        except ValueError:
            raise CommbenchError(f"{where} {spec}: the factor after @ must be a number") from None
        if not 0 <= f < 1:
            raise CommbenchError(f"{where} {spec}: the factor must be at least 0 and below 1")
        kind, *args = body.split(":")
        if not _fits(kind, args, hosts, leaves, g):
            raise CommbenchError(f"{where} {spec}: not a {', '.join(planted_kinds())} of this cluster (hosts "
                                 "node0001..., leaves with --leaf-size)")
        plants[f"{kind}:{':'.join(sorted(args) if kind == 'link' else args)}"] = f
    return plants


def _fits(kind: str, args: list[str], hosts: set, leaves: set, g: int) -> bool:
    if kind == "host":
        return len(args) == 1 and args[0] in hosts
    if kind in ("rail", "rx", "tx"):
        return len(args) == 2 and args[0] in hosts and args[1].isdecimal() and int(args[1]) < g
    if kind == "link":
        return len(args) == 2 and args[0] != args[1] and set(args) <= hosts
    return kind in ("switch", "uplink") and len(args) == 1 and args[0] in leaves


@dataclass(frozen=True, slots=True)
class ModelFlow:
    """A flow as a model sees it: which ranks, where, in which round, under what load."""
    src_host: str
    dst_host: str
    src_local: int
    dst_local: int
    src_leaf: Optional[str]
    dst_leaf: Optional[str]
    stage: str
    round: int
    load: float


@dataclass(frozen=True)
class Fabric:
    """The built-in fabric's settings."""
    noise: float = NOISE
    intra_noise: float = INTRA_NOISE
    ecmp: float = 0.0
    mild: float = 0.0
    uplinks: int = UPLINKS
    sticky: bool = False  # --hash connection: a connection keeps its uplink all run


class Model:
    """The built-in fabric with its planted faults: rate(flow, rng), as a --model file defines it."""

    def __init__(self, layout: Layout, plants: dict[str, float], fabric: Fabric, seed: int):
        self.fabric = fabric
        self.by_kind: dict[str, dict] = {}
        for spec, f in plants.items():
            kind, *args = spec.split(":")
            key = tuple(args) if kind in ("link",) else (args[0], int(args[1])) if len(args) == 2 else args[0]
            self.by_kind.setdefault(kind, {})[key] = f
        names = layout.names()
        self.seed = seed
        self.mild = set(random.Random(f"mild {seed}").sample(names, round(fabric.mild * len(names))))

    def rate(self, flow: ModelFlow, rng: random.Random) -> float:
        fab, k = self.fabric, self.by_kind
        a, b = flow.src_host, flow.dst_host
        if a == b:
            return INTRA_GBPS * math.exp(fab.intra_noise * rng.gauss(0, 1))
        none: dict = {}
        f = min(k.get("host", none).get(a, 1), k.get("host", none).get(b, 1),
                k.get("rail", none).get((a, flow.src_local), 1), k.get("rail", none).get((b, flow.dst_local), 1),
                k.get("tx", none).get((a, flow.src_local), 1), k.get("rx", none).get((b, flow.dst_local), 1),
                k.get("link", none).get((a, b) if a < b else (b, a), 1), MILD if a in self.mild or b in self.mild else 1)
        if flow.src_leaf != flow.dst_leaf:
            for leaf in (flow.src_leaf, flow.dst_leaf):
                f = min(f, k.get("switch", none).get(leaf, 1))
                up = k.get("uplink", none).get(leaf)
                if up is not None and self._lands(flow, rng) < 1 / fab.uplinks:
                    f = min(f, up)
            if fab.ecmp and rng.random() < fab.ecmp * flow.load:
                f = min(f, 0.5)  # two flows on one spine uplink: half of it each
        return INTER_GBPS * f * math.exp(fab.noise * rng.gauss(0, 1))

    def _lands(self, flow: ModelFlow, rng: random.Random) -> float:
        """Where a flow's uplink is drawn, in [0, 1): afresh, or from its connection once for the run."""
        if not self.fabric.sticky:
            return rng.random()
        a, b = sorted((flow.src_host, flow.dst_host))
        return random.Random(f"hash {self.seed} {a} {b} {flow.src_local}").random()


class Simulation:
    """Measures rounds with a model's rate(flow, rng), every flow drawn from one seeded stream."""

    def __init__(self, layout: Layout, rate: Callable, seed: int):
        self.layout, self.rate = layout, rate
        self.rng = random.Random(f"model {seed}")
        self.local = layout.local()
        self.leaf_of = layout.leaf_of or {}
        self.count = 0

    def measure(self, rnd: Round) -> list[Flow]:
        hosts, local, leaf = self.layout.hosts, self.local, self.leaf_of.get
        n_round = self.count
        self.count += 1
        cross = sum(leaf(hosts[a]) != leaf(hosts[b]) for a, b in rnd.pairs)
        load = cross / max(1, len(hosts) // 2)
        out = []
        for a, b in rnd.pairs:
            for s, d in ((a, b), (b, a)) if rnd.both else ((a, b),):
                hs, hd = hosts[s], hosts[d]
                flow = ModelFlow(hs, hd, local[s], local[d], leaf(hs), leaf(hd), rnd.stage, n_round, load)
                out.append(Flow(rnd.stage, hs, hd, local[s], local[d], self.rate(flow, self.rng), None, n_round))
        return out


def load_model(path: str, layout: Layout, g: int) -> tuple[Callable, dict[str, float]]:
    """A --model file's rate and its PLANTED faults, checked as --plant's are."""
    try:
        space = runpy.run_path(path)
    except OSError as e:
        raise CommbenchError(f"--model {path}: {e.strerror}") from None
    if not callable(space.get("rate")) or not isinstance(space.get("PLANTED"), (list, tuple)):
        raise CommbenchError(f"--model {path}: it must define rate(flow, rng) and PLANTED, a list of --plant specs")
    return space["rate"], parse_plants(list(space["PLANTED"]), layout, g, f"--model {path}: PLANTED")


def simulate(n: int, g: int, leaf_size: int | None, plant: str, seed: int, rounds: int | None,
             fabric: Fabric = Fabric(), model: Optional[str] = None):
    layout = cluster(n, g, leaf_size)
    if model:
        rate, plants = load_model(model, layout, g)
    else:
        plants = parse_plants(plant.split(","), layout, g)
        rate = Model(layout, plants, fabric, seed).rate
    start = time.perf_counter()
    sim = Simulation(layout, rate, seed)
    judged = ("bandwidth_gbps",)
    first = first_rounds(layout, rounds, seed)
    flows = [f for rnd in first for f in sim.measure(rnd)]
    needs = plan(layout, flows, THRESHOLD, judged)
    confirm = confirm_rounds(layout, flows, seed, THRESHOLD, judged, needs=needs)
    flows += [f for rnd in confirm for f in sim.measure(rnd)]
    result = judge(layout, flows, THRESHOLD, judged, planned=needs)
    compute = time.perf_counter() - start
    return plants, result, first + confirm, len(flows), compute


def mix(n: int, g: int, leaf_size: int, seed: int) -> str:
    """One fault of each kind a model plants, apart, drawn from the seed."""
    layout = cluster(n, g, leaf_size)
    rng = random.Random(f"mix {seed}")
    switch, uplink = rng.sample(sorted(set(layout.leaf_of.values())), 2)
    free = [h for h in layout.names() if layout.leaf_of[h] not in (switch, uplink)]
    host, rail, rx, tx = rng.sample(free, 4)
    taken = {host, rail, rx, tx}
    measured = [p for r in first_rounds(layout, default_rounds(n, True), seed) for p in r.hosts
                if not taken & set(p) and not {switch, uplink} & {layout.leaf_of[p[0]], layout.leaf_of[p[1]]}]
    a, b = rng.choice(measured)
    return (f"host:{host},rail:{rail}:{rng.randrange(g)},rx:{rx}:{rng.randrange(g)},tx:{tx}:{rng.randrange(g)},"
            f"link:{a}:{b},switch:{switch},uplink:{uplink}")


@dataclass
class Cell:
    """What the mixes of one fabric gave."""
    runs: int = 0
    exact: int = 0
    false_hosts: int = 0
    false_runs: int = 0
    missed: int = 0
    missed_runs: int = 0
    rounds: int = 0
    measuring: float = 0.0
    compute: float = 0.0

    def add(self, plants: dict, result: dict, rounds: list, compute: float) -> tuple[set, set]:
        got = named(result["findings"])
        scope = _scope(plants, result)
        false = {h for h, v in result["verdicts"].items() if v != "PASS" and h not in scope}
        missed = set(plants) - got
        self.runs += 1
        self.exact += got == set(plants)
        self.false_hosts += len(false)
        self.false_runs += bool(false)
        self.missed += len(missed)
        self.missed_runs += bool(missed)
        self.rounds = max(self.rounds, len(rounds))
        self.measuring = max(self.measuring, sum(map(round_seconds, rounds)))
        self.compute = max(self.compute, compute)
        return false, missed

    def line(self) -> str:
        return (f"runs {self.runs} | named exactly {self.exact} | healthy hosts FAILed {self.false_hosts} "
                f"(in {self.false_runs} runs) | faults missed {self.missed} (in {self.missed_runs} runs) | "
                f"rounds <= {self.rounds} | measuring <= {self.measuring:.1f} s | compute <= {self.compute:.1f} s")


def _scope(plants: dict, result: dict) -> set[str]:
    """The hosts a planted fault may FAIL: its host(s), or every host below its leaf."""
    leaf_of = result.get("leaf_of") or {}
    out = set()
    for spec in plants:
        kind, *args = spec.split(":")
        if kind in ("switch", "uplink"):
            out |= {h for h, leaf in leaf_of.items() if leaf == args[0]}
        elif kind == "link":
            out |= set(args)
        else:
            out.add(args[0])
    return out


def run_mixes(args, fabric: Fabric, quiet: bool = False) -> Cell:
    cell = Cell()
    if not quiet:
        print("| hosts x ranks | leaves of | seed | named exactly | healthy hosts FAILed | missed | named besides | "
              "rounds | measuring (s) | compute (s) |")
        print("|---|---|---|---|---|---|---|---|---|---|")
    for seed in range(args.seed, args.seed + args.mixes):
        plant = mix(args.hosts, args.ranks_per_host, args.leaf_size, seed)
        plants, result, rounds, flows, compute = simulate(args.hosts, args.ranks_per_host, args.leaf_size, plant,
                                                          seed, default_rounds(args.hosts, True), fabric)
        result["leaf_of"] = cluster(args.hosts, 1, args.leaf_size).leaf_of
        false, missed = cell.add(plants, result, rounds, compute)
        if not quiet:
            besides = named(result["findings"]) - set(plants)
            print(f"| {args.hosts} x {args.ranks_per_host} | {args.leaf_size} | {seed} | "
                  f"{'yes' if not besides and not missed else 'NO'} | {', '.join(sorted(false)) or '-'} | "
                  f"{', '.join(sorted(missed)) or '-'} | {', '.join(sorted(besides)) or '-'} | {len(rounds)} | "
                  f"{sum(map(round_seconds, rounds)):.1f} | {compute:.1f} |")
    return cell


def describe(fabric: Fabric) -> str:
    return (f"noise {100 * fabric.noise:g} %, intra {100 * fabric.intra_noise:g} %, ecmp {100 * fabric.ecmp:g} %, "
            f"mild {100 * fabric.mild:g} %{', hash by connection' if fabric.sticky else ''}")


def grid(args, fabric: Fabric) -> int:
    cells = [(noise, ecmp) for noise in _percents(args.grid_noise, "--grid-noise")
             for ecmp in _percents(args.grid_ecmp, "--grid-ecmp")]
    print("| hosts x ranks | noise | ecmp | mild | runs | named exactly | healthy hosts FAILed (runs) | "
          "faults missed (runs) | rounds | measuring (s) | compute (s) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    exact = True
    for noise, ecmp in cells:
        c = run_mixes(args, dataclasses.replace(fabric, noise=noise, ecmp=ecmp), quiet=True)
        exact &= c.exact == c.runs
        print(f"| {args.hosts} x {args.ranks_per_host} | {100 * noise:g} % | {100 * ecmp:g} % | "
              f"{100 * fabric.mild:g} % | {c.runs} | {c.exact} | {c.false_hosts} ({c.false_runs}) | "
              f"{c.missed} ({c.missed_runs}) | {c.rounds} | {c.measuring:.1f} | {c.compute:.1f} |", flush=True)
    return 0 if exact else 1


def _percents(text: str, option: str) -> list[float]:
    try:
        values = [float(v) / 100 for v in text.split(",")]
    except ValueError:
        raise CommbenchError(f"{option} takes percentages separated by commas, not {text!r}") from None
    if any(not 0 <= v <= 1 for v in values):
        raise CommbenchError(f"{option}: each percentage must be between 0 and 100")
    return values


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, required=True)
    ap.add_argument("--ranks-per-host", type=int, required=True)
    ap.add_argument("--leaf-size", type=int, default=None)
    ap.add_argument("--plant", default="")
    ap.add_argument("--model", default=None, help="a Python file defining rate(flow, rng) and PLANTED (see above)")
    ap.add_argument("--noise", type=float, default=NOISE, help="sigma of the lognormal noise between hosts")
    ap.add_argument("--intra-noise", type=float, default=INTRA_NOISE, help="sigma of the noise inside hosts")
    ap.add_argument("--ecmp", type=float, default=0.0, help="share of a fully cross-leaf round's flows that collide")
    ap.add_argument("--mild", type=float, default=0.0, help="share of hosts at 0.88 of the rate (they must PASS)")
    ap.add_argument("--uplinks", type=int, default=UPLINKS, help="uplinks of a leaf (uplink:LEAF degrades one)")
    ap.add_argument("--hash", choices=("round", "connection"), default="round",
                    help="a degraded uplink takes a flow drawn afresh each round, or a connection for the run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", default=None, help="K, or 'all' (default: links' default for the cluster)")
    ap.add_argument("--verdicts", action="store_true", help="print every host's verdict line and the findings")
    ap.add_argument("--mixes", type=int, default=None, help="M seeded mixes of one fault of each kind (see above)")
    ap.add_argument("--grid", action="store_true", help="with --mixes: every cell of noise x ecmp, a row each")
    ap.add_argument("--grid-noise", default=GRID_NOISE, help=f"the grid's noise, in %% (default {GRID_NOISE})")
    ap.add_argument("--grid-ecmp", default=GRID_ECMP, help=f"the grid's ecmp, in %% (default {GRID_ECMP})")
    args = ap.parse_args()
    try:
        if args.hosts < 2 or args.ranks_per_host < 1 or (args.leaf_size is not None and args.leaf_size < 1):
            raise CommbenchError("--hosts must be at least 2, --ranks-per-host and --leaf-size at least 1")
        if min(args.noise, args.intra_noise, args.ecmp, args.mild) < 0 or args.ecmp > 1 or args.mild > 1:
            raise CommbenchError("--noise and --intra-noise must be at least 0, --ecmp and --mild between 0 and 1")
        if args.uplinks < 1:
            raise CommbenchError("--uplinks must be at least 1")
        if args.model and args.plant:
            raise CommbenchError("--model plants its own faults (PLANTED): give it or --plant, not both")
        fabric = Fabric(args.noise, args.intra_noise, args.ecmp, args.mild, args.uplinks, args.hash == "connection")
        if args.grid and args.mixes is None:
            raise CommbenchError("--grid runs --mixes M in every cell: give --mixes")
        if args.mixes is not None:
            if args.mixes < 1 or not args.leaf_size or args.plant or args.rounds or args.model:
                raise CommbenchError("--mixes takes a count of at least 1, needs --leaf-size, and no --plant, --model "
                                     "or --rounds")
            if math.ceil(args.hosts / args.leaf_size) < 3:
                raise CommbenchError("--mixes plants a switch and an uplink fault in two leaves apart: it needs 3 "
                                     "leaves at least")
            if args.grid:
                return grid(args, fabric)
            cell = run_mixes(args, fabric)
            print(f"{args.hosts} hosts x {args.ranks_per_host} ranks in leaves of {args.leaf_size}, {describe(fabric)}: "
                  f"{cell.line()}")
            return 0 if cell.exact == cell.runs else 1
        k = parse_rounds(args.rounds) if args.rounds is not None else default_rounds(args.hosts, bool(args.leaf_size))
        plants, result, rounds, flows, compute = simulate(args.hosts, args.ranks_per_host, args.leaf_size, args.plant,
                                                          args.seed, k, fabric, args.model)
    except CommbenchError as e:
        print(f"links_at_scale: error: {e}", file=sys.stderr)
        return 2
    got = named(result["findings"])
    if args.verdicts:
        for line in verdict_lines(result["verdicts"]):
            print(line)
    transient = [f for f in result["findings"] if f["kind"] == "transient"]
    stages = {s: sum(r.stage == s for r in rounds) for s in ("intra", "inter", "confirm")}
    print(f"# {args.hosts} hosts x {args.ranks_per_host} ranks{f' in leaves of {args.leaf_size}' if args.leaf_size else ''}, "
          f"seed {args.seed}, {'model ' + args.model if args.model else describe(fabric)}: rounds {stages['intra']} intra + "
          f"{stages['inter']} inter + {stages['confirm']} confirm; {len(transient)} transient slowdown(s) not repeated")
    measured = {tuple(sorted(p)) for r in rounds for p in r.hosts}
    for spec in sorted(plants):
        kind, *ends = spec.split(":")
        if kind == "link" and tuple(ends) not in measured:
            # Only a schedule that pairs them can see a fault of one host pair alone.
            print(f"# {spec}: these rounds never pair the two hosts ({len(measured)} of "
                  f"{args.hosts * (args.hosts - 1) // 2} host pairs measured; --rounds all measures every one)")
    print(f"planted: {', '.join(sorted(plants)) or '-'} | named: {', '.join(sorted(got)) or '-'} | rounds {len(rounds)} | "
          f"flows {flows} | measuring {sum(map(round_seconds, rounds)):.1f} s | compute {compute:.1f} s")
    return 0 if got == set(plants) else 1


if __name__ == "__main__":
    sys.exit(main())
