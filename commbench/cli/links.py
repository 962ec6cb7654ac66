"""`commbench links`: every rank pair's latency and bandwidth, alone and under load, and the link,
rank or host that is slow (analysis/links.py)."""

from __future__ import annotations

import dataclasses
import sys
from typing import Optional

import click

from ..errors import CommbenchError, NodeError
from ..launch import watchdog
from ..launch.world import detect_launcher
from ..redact import scrub
from ..run import preflight
from ..sizes import parse_size
from ..transports import TRANSPORTS, default_p2p_transport, transport_names
from .common import (
    MAX_SEED,
    MAX_WINDOW,
    Finite,
    attach_nccl_log,
    given_options,
    open_output,
    policy_options,
    ranks_option,
    resolve_device,
    run_ranks,
    sweep,
    timeout_option,
    timing_options,
)
from .group import cli

LEVELS = ("auto", "rank", "host")
# Up to this many ranks every pair is measured (rank level) under --level auto.
RANK_LEVEL_MAX = 8


@cli.command()
@click.option("--impl", type=click.Choice(transport_names()), default=None,
              help="Transport between ranks: " + "; ".join(f"{t.name} ({t.p2p_summary})" for t in TRANSPORTS) + ".")
@click.option("--latency-size", default="8", show_default=True, help="Ping-pong message size in bytes.")
@click.option("--bandwidth-size", default="4M", show_default=True, help="Bandwidth message size in bytes.")
@click.option("--window", type=click.IntRange(min=1, max=MAX_WINDOW), default=64, show_default=True,
              help="Messages in flight per bandwidth iteration.")
@click.option("--threshold-pct", type=Finite(0, 100, min_open=True, max_open=True), default=75.0, show_default=True,
              help="Flag a pair below this percent of the typical bandwidth of comparable pairs (the median over "
                   "ranks of each rank's median pair; latency: above the typical one / this share).")
@click.option("--mad-z", type=Finite(min=0, min_open=True), default=None,
              help="Also flag a pair whose modified z-score (on the MAD of comparable pairs) passes this, the "
                   "slow way (3.5 is customary; off by default, see docs/commands/links.md).")
@click.option("--judge", "judged", type=click.Choice(["both", "bandwidth", "latency"]), default="both",
              show_default=True, help="Which metric flags pairs (the matrices show both).")
@click.option("--from", "source", type=click.Path(dir_okay=False), default=None,
              help="Judge an earlier links result file again instead of measuring.")
@click.option("--level", type=click.Choice(LEVELS), default="auto", show_default=True,
              help="rank: every rank pair, as rank x rank matrices; host: rounds of host matchings, local rank i "
                   "with local rank i (rail-aligned), suspects confirmed against healthy partners, one verdict per "
                   f"host; auto: host where the ranks span several hosts and number more than {RANK_LEVEL_MAX}.")
@click.option("--rounds", "rounds_text", default=None,
              help="Host level: how many host matchings, or 'all' (every host pair). Default: every host at least "
                   "3 different partners (every pair below 4 hosts).")
@click.option("--seed", type=click.IntRange(min=0, max=MAX_SEED), default=0, show_default=True,
              help="Host level: the seed of the matchings (a rerun with the same seed repeats them).")
@click.option("--topology", "topology_path", type=click.Path(dir_okay=False), default=None,
              help="Host level: Slurm's topology.conf (SwitchName=leaf1 Nodes=node[001-032]); half the rounds then "
                   "pair hosts within their leaf and half across leaves, and a slow leaf switch is named.")
@click.option("--intra/--no-intra", default=True, show_default=True,
              help="Host level: measure and judge the rank pairs inside each host too (--no-intra: only flows "
                   "between hosts, where another check covers the inside of a node).")
@click.option("--nic-rate", "nic_text", default=None, metavar="FABRIC|GBPS",
              help="Host level: the rate a flow between hosts has alone, as a catalog fabric (ib-ndr, eth-400g; see "
                   "'commbench fabrics') or GB/s. Default: rank 0's fastest NIC as the topology snapshot knows it. "
                   "A typical flow below 60 % of it is warned of: a NIC at half its rate would pass.")
@policy_options
@timing_options
@ranks_option
@timeout_option
def links(impl, latency_size, bandwidth_size, window, threshold_pct, mad_z, judged, source, level, rounds_text, seed,
          topology_path, intra, nic_text, nranks, timeout_s, output, policy) -> None:
    """Find the bad link, rank, host, NIC rail or leaf switch. Rank level: every rank pair's latency and
    bandwidth, one pair at a time and in rounds of disjoint pairs at once, as rank x rank matrices; pairs
    far below the typical one of comparable (intra-host or inter-host) pairs are flagged and attributed.
    Host level: rounds of host matchings whose time does not grow with the host count, then the suspects
    against healthy partners; one verdict line per host. Exit 1 when anything is flagged."""
    from ..analysis.links import METRICS, section
    judged = tuple(METRICS) if judged == "both" else tuple(m for m, name in METRICS.items() if name == judged)
    from ..node.gpu import shared_gpu
    if shared_gpu() and impl == "nccl":
        judged = ()  # the shared-GPU functional test: times that are not the GPU's
    if source is not None:
        from ..results.document import load_document
        doc = load_document(source)
        if "links" not in doc:
            raise CommbenchError(f"{source} holds no links section: give a result file of 'commbench links'")
        old = doc["links"]
        # Judging again reads only the thresholds; host level has its own noise rule, not --mad-z.
        host = old.get("level") == "host"
        ignored = given_options({"source", "threshold_pct", "judged"} | (set() if host else {"mad_z"}))
        if ignored:
            reads = "--threshold-pct and --judge" if host else "--threshold-pct, --judge and --mad-z"
            raise CommbenchError(f"--from judges {source} again and measures nothing: {', '.join(ignored)} "
                                 f"{'does' if len(ignored) == 1 else 'do'} not apply to it (it reads {reads})")
        if host:
            from ..analysis.host.report import rejudge
            found = rejudge(old, doc["results"], threshold_pct, judged, source)
            _show(found)
            sys.exit(1 if _flagged(found) else 0)
        found = section(old["impl"], old["hosts"], old["latency_size"], old["bandwidth_size"], threshold_pct, mad_z,
                        doc["results"], judged)
        _show(found)
        sys.exit(1 if found["findings"] else 0)
    from ..analysis.fabrics import nic_rate
    from ..analysis.topology import load_topology
    nic_gbps = None if nic_text is None else nic_rate(nic_text)
    host_rounds = _host_rounds(level, rounds_text, seed, topology_path, intra, nic_gbps)
    if topology_path is not None and not topology_path.strip():
        raise CommbenchError("--topology '': give the path of Slurm's topology.conf, or leave the option out")
    topology = load_topology(topology_path) if topology_path is not None else None
    if detect_launcher() is None and level == "auto" and _host_only(rounds_text, seed, topology_path, intra, nic_gbps):
        raise NodeError(f"{HOST_OPTIONS} apply at host level, and a standalone run's ranks are all on this one host: "
                        f"launch across hosts (mpirun, srun, torchrun)")

    sizes = [parse_size(latency_size, "--latency-size"), parse_size(bandwidth_size, "--bandwidth-size")]
    if min(sizes) < 1:
        raise CommbenchError("--latency-size and --bandwidth-size must be at least 1 byte")
    impl = impl or default_p2p_transport(detect_launcher())
    device = next(t.p2p_device for t in TRANSPORTS if t.name == impl)
    gpus = resolve_device("cuda", impl)[1] if device == "cuda" else 0
    if detect_launcher() is None and (nranks or 2) < 2:
        raise CommbenchError("links needs at least 2 ranks: use --np 2 or more")
    if detect_launcher() is None and level == "host":
        raise NodeError("--level host needs ranks on two hosts or more: a standalone run's ranks are all on this "
                             "one; launch across hosts (mpirun, srun, torchrun)")
    # The pairs are all of them, whatever the count: links checks the rank count itself.
    checks = dataclasses.replace(preflight.for_p2p(sizes, "all", device, output, impl, "commbench links"), pairs=None)

    def body(world):
        from ..results.document import default_path
        from ..run.config import RunConfig
        from ..run.links import run_links
        if world.size < 2:
            raise CommbenchError("links needs at least 2 ranks: launch 2 or more")
        cfg = RunConfig(op="p2p", impls=(impl,), sizes=tuple(sizes), dtype="uint8", redop="none", device=device,
                        window=window, timeout_s=timeout_s, policy=policy)
        if _level(level, world.hosts) == "host":
            return _host_body(world, cfg, sizes, threshold_pct, judged, host_rounds, seed, topology, intra, output,
                              nic_gbps=nic_gbps)
        reporter = open_output(world, cfg, output or default_path("links"), _rank_level_steps(world.size),
                               config={"links": {"latency_size": sizes[0], "bandwidth_size": sizes[1],
                                                 "threshold_pct": threshold_pct, "mad_z": mad_z,
                                                 "judged": list(judged)}})
        watchdog.start(world, cfg.timeout_s, reporter)

        return _measure_and_judge(world, reporter, lambda: run_links(world, cfg, sizes[0], sizes[1], reporter),
                                  lambda: section(impl, world.hosts, sizes[0], sizes[1], threshold_pct, mad_z,
                                                  reporter.records, judged), impl == "nccl")

    run_ranks(nranks, max(gpus, 2), body, checks, timeout_s, measurements=_rank_level_steps, policy=policy)


def _rank_level_steps(ranks: int) -> int:
    """Links at rank level: every pair, its latency and its bandwidth, each way."""
    return 2 * 2 * (ranks * (ranks - 1) // 2)


HOST_OPTIONS = "--rounds, --seed, --topology, --no-intra and --nic-rate"


def _host_only(rounds_text, seed: int, topology_path, intra: bool, nic_gbps: Optional[float]) -> bool:
    """Whether an option that only host level reads was given."""
    return rounds_text is not None or seed != 0 or topology_path is not None or not intra or nic_gbps is not None


def _host_rounds(level: str, rounds_text, seed: int, topology_path, intra: bool,
                 nic_gbps: Optional[float]) -> Optional[str | int]:
    """--rounds as host level takes it ('default', a count or None for every pair), refused with
    --level rank, as are the other host-level options: before any rank starts."""
    if level == "rank" and _host_only(rounds_text, seed, topology_path, intra, nic_gbps):
        raise CommbenchError(f"{HOST_OPTIONS} apply to --level host (or auto across hosts), not rank")
    return "default" if rounds_text is None else parse_rounds(rounds_text)


def parse_rounds(value: str) -> Optional[int]:
    """--rounds: a positive count, or 'all' (None: every host pair)."""
    if value.strip().lower() == "all":
        return None
    digits = value.strip()
    # ASCII digits alone: int() reads a full-width '３', '1_0' and 4,000 digits too.
    if not (digits.isascii() and digits.isdigit() and len(digits) <= 9):
        raise CommbenchError(f"--rounds must be a positive whole number or 'all', not {value[:24]!r}")
    k = int(digits)
    if k < 1:
        raise CommbenchError(f"--rounds must be at least 1 (or 'all'), not {k}")
    return k


def _level(level: str, hosts: list[str]) -> str:
    several = len(set(hosts)) > 1
    if level == "host" and not several:
        raise CommbenchError(f"--level host needs ranks on two hosts or more: all {len(hosts)} ranks are on {hosts[0]}")
    if level == "auto":
        return "host" if several and len(hosts) > RANK_LEVEL_MAX else "rank"
    return level


def _host_body(world, cfg, sizes, threshold_pct, judged, host_rounds, seed, topology, intra, output, *,
               nic_gbps: Optional[float]) -> int:
    from ..analysis.host.level import Layout, first_rounds
    from ..analysis.host.report import nic_rate_gbps, report, round_rows
    from ..analysis.host.schedule import default_rounds
    from ..results.document import default_path
    from ..run.links import HostPlan, HostRun, run_host_links
    names = list(dict.fromkeys(world.hosts))
    if topology is not None:
        topology.check_hosts(names)
    layout = Layout(world.hosts, {h: topology.leaf_of[h] for h in names} if topology else None)
    k = default_rounds(len(names), topology is not None) if host_rounds == "default" else host_rounds
    plan = HostPlan(layout, k, seed, threshold_pct / 100, judged, intra)
    settings = {"level": "host", "latency_size": sizes[0], "bandwidth_size": sizes[1], "threshold_pct": threshold_pct,
                "judged": list(judged), "seed": seed, "rounds_asked": "all" if k is None else k,
                "topology": scrub(topology.source) if topology else None, "intra": intra, "nic_gbps": nic_gbps}
    if cfg.impls[0] == "nccl":
        from ..transports.nccl import channels_of_a_flow_alone
        settings["nccl_channels_per_net_peer"] = channels_of_a_flow_alone()
    # The progress bar counts the first rounds' rows; the confirmation's come on top.
    steps = sum((3 if r.both else 2) * len(r.pairs) for r in first_rounds(layout, k, seed, intra))
    reporter = open_output(world, cfg, output or default_path("links"), steps, config={"links": settings})
    watchdog.start(world, cfg.timeout_s, reporter)

    from ..node.machine import pinned_nic
    nics = world.gather(pinned_nic())  # by rank, on rank 0: a rail's NIC where the launch names it
    done = HostRun()
    if reporter:
        def salvage(absent) -> None:
            """A host that died or stalled midway: FAIL lost, the others judged on what was measured."""
            ranks: dict[str, list[int]] = {}
            for r in sorted(absent):
                ranks.setdefault(world.hosts[r], []).append(r)
            lost = {h: f"rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))} did not arrive in {reporter.current}"
                    for h, rs in ranks.items()}
            found = report(cfg.impls[0], layout, settings, list(done.flows), round_rows(done.rounds), lost, nics,
                           rows=reporter.records)
            reporter.attach("links", found)
            _show(found)
        reporter.salvage = salvage

    return _measure_and_judge(world, reporter, lambda: run_host_links(world, cfg, sizes[0], sizes[1], reporter, plan, done),
                              lambda: report(cfg.impls[0], layout,
                                             {**settings, "nccl_channels": reporter.file.doc.get("nccl_channels")},
                                             done.flows, round_rows(done.rounds),
                                             nics=reporter.file.doc.get("nccl_nics") or nics,
                                             nic_gbps=nic_gbps or nic_rate_gbps(reporter.file.doc.get("topology")),
                                             rows=reporter.records),
                              cfg.impls[0] == "nccl")


def _measure_and_judge(world, reporter, measure, judge, nccl: bool) -> int:
    """measure() on every rank (the wrong bytes), then judge() on rank 0, which holds the rows (a
    refusal there reaches every rank): the links section, kept and shown. Returns what was flagged."""
    def run():
        if nccl:
            from ..transports.nccl import log_connections
            log_connections()
        wrong = measure()
        if nccl:
            attach_nccl_log(world, reporter)
        found = world.root_call(judge)
        if reporter:
            reporter.attach("links", found)
        return wrong + _flagged(found)

    flagged = sweep(reporter, run, world)
    if reporter:
        _show(reporter.file.doc["links"])
    return flagged


def _flagged(found: dict) -> int:
    """How many findings fail something: at host level a transient slowdown is reported, not failed."""
    if found.get("level") != "host":
        return len(found["findings"])
    from ..results.findings import failing
    return len(failing(found["findings"]))


def _show(found: dict) -> None:
    click.echo("#")
    if found.get("level") == "host":
        from ..analysis.host.report import lines
    else:
        from ..analysis.links import lines
    for line in lines(found):
        click.echo(line)
