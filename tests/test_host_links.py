"""commbench links at host level: the rounds (inside hosts, seeded host matchings, within and across
leaves, confirmation), the attribution of host, rail, link and switch faults on a modelled cluster
with noise (benchmarks/links_at_scale.py's model), the verdict lines, the simulation as a user runs
it, the command's refusals, and real runs across the test cluster (tests/cluster.py): 4 hosts of 2
ranks with one host shaped to a third, and 8 hosts of two rails each in three leaves under a spine,
with one fault per run (a slow host, a slow rail, a rail slow where its host receives, a slow host
pair, a slow uplink), each named as its kind and no other host failed."""

import contextlib
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from cluster import FLOW_WAITS
from conftest import COMMBENCH, commbench, rank_pids, wait_for_rows

from commbench.analysis import fabrics
from commbench.analysis.host import level as host_level
from commbench.analysis.host import schedule as host_schedule
from commbench.analysis.host import verdicts as host_verdicts
from commbench.analysis.links import circle_rounds
from commbench.results import document as results
from commbench.results import findings as host_findings

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(os.path.dirname(HERE), "benchmarks", "links_at_scale.py")
sys.path.insert(0, os.path.dirname(BENCH))
import links_at_scale as sim  # noqa: E402

VERDICT = re.compile(r"^(\S+) +\| (PASS|FAIL (" + "|".join(host_findings.KINDS) + r"): .+)$")


def names(n):
    return [f"node{k:04d}" for k in range(1, n + 1)]


def measure(layout, plants, rounds, seed=0, fabric=None):
    """The flows of `rounds` on the modelled fabric with `plants` ({spec: factor})."""
    model = sim.Simulation(layout, sim.Model(layout, plants, fabric or sim.Fabric(), seed).rate, seed)
    return [f for r in rounds for f in model.measure(r)]


def is_matching(pairs):
    ends = [h for p in pairs for h in p]
    return len(ends) == len(set(ends))


# ---- rounds -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7, 16, 33])
def test_default_rounds_give_every_host_three_partners_or_every_pair(n):
    hosts = names(n)
    rounds = host_schedule.inter_rounds(hosts, host_schedule.default_rounds(n, False), seed=0)
    assert all(is_matching(r) for r in rounds)
    partners = {h: set() for h in hosts}
    for a, b in (p for r in rounds for p in r):
        partners[a].add(b)
        partners[b].add(a)
    pairs = [p for r in rounds for p in r]
    assert len(pairs) == len(set(pairs)), "a pair measured twice"
    if n < 4:
        assert len(pairs) == n * (n - 1) // 2
    else:
        assert min(len(p) for p in partners.values()) >= 3


@pytest.mark.parametrize("n", [4, 9])
def test_rounds_all_measures_every_host_pair_once(n):
    rounds = host_schedule.inter_rounds(names(n), None, seed=3)
    assert len(rounds) == circle_rounds(n)
    pairs = sorted(tuple(sorted(p)) for r in rounds for p in r)
    assert pairs == sorted((a, b) for i, a in enumerate(names(n)) for b in names(n)[i + 1:])


def test_the_seed_decides_the_matchings_and_a_rerun_repeats_them():
    hosts = names(40)
    assert host_schedule.inter_rounds(hosts, 3, 7) == host_schedule.inter_rounds(hosts, 3, 7)
    assert host_schedule.inter_rounds(hosts, 3, 7) != host_schedule.inter_rounds(hosts, 3, 8)


def test_with_leaves_half_the_rounds_stay_inside_leaves_and_half_cross_them():
    layout = sim.cluster(40, 1, 8)
    rounds = host_schedule.inter_rounds(layout.names(), 4, 0, layout.leaf_of)
    same = [[layout.leaf_of[a] == layout.leaf_of[b] for a, b in r] for r in rounds]
    assert [all(s) for s in same] == [True, True, False, False] and not any(any(s) for s in same[2:])
    assert all(len(r) == 20 for r in rounds) and all(is_matching(r) for r in rounds)
    pairs = [p for r in rounds for p in r]
    assert len(pairs) == len(set(pairs))


def test_a_leaf_of_most_hosts_leaves_some_idle_in_cross_rounds_but_runs_no_empty_round():
    hosts = names(9)
    leaf_of = {h: "big" if i < 8 else "small" for i, h in enumerate(hosts)}
    rounds = host_schedule.inter_rounds(hosts, 4, 0, leaf_of)
    assert rounds and all(rounds) and all(is_matching(r) for r in rounds)
    cross = [r for r in rounds if any(leaf_of[a] != leaf_of[b] for a, b in r)]
    assert cross and all(len(r) == 1 for r in cross)  # the lone host's leaf: one cross pair a round


def test_round_count_depends_on_k_not_on_the_host_count():
    counts = {n: len(host_level.first_rounds(sim.cluster(n, 4, None), 3, 0)) for n in (8, 80, 800)}
    assert set(counts.values()) == {circle_rounds(4) + 3}, counts


def test_inside_hosts_every_rank_pair_once_all_hosts_at_once():
    groups = host_schedule.host_ranks(["a"] * 4 + ["b"] * 3 + ["c"])
    rounds = host_schedule.intra_rounds(groups)
    assert len(rounds) == max(circle_rounds(4), circle_rounds(3))
    assert all(is_matching(r) for r in rounds)
    assert sorted(p for r in rounds for p in r) == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3), (4, 5), (4, 6), (5, 6)]


def test_rail_flows_pair_local_rank_i_with_local_rank_i():
    groups = host_schedule.host_ranks(["a", "b", "a", "b", "c"])
    assert host_schedule.rail_flows(groups, [("a", "b"), ("a", "c")]) == [(0, 1), (2, 3), (0, 4)]


def test_confirmation_gives_each_suspect_unmet_trusted_partners_and_measures_pairs_again():
    hosts = names(12)
    met = {"node0001": {"node0002", "node0003"}}
    rounds = host_schedule.confirmation_rounds({"node0001": 2, "node0004": 2}, [("node0005", "node0006")],
                                               hosts[6:], met, hosts, seed=0)
    assert all(is_matching(r) for r in rounds)
    flat = [p for r in rounds for p in r]
    assert ("node0005", "node0006") in flat
    for s in ("node0001", "node0004"):
        partners = [b if a == s else a for a, b in flat if s in (a, b)]
        assert len(partners) == 2 and set(partners) <= set(hosts[6:]) and not set(partners) & met.get(s, set())
    # Too few trusted hosts: it stops with what it could arrange.
    assert host_schedule.confirmation_rounds({"node0001": 3}, [], ["node0002"], {}, hosts, 0) == [[("node0001", "node0002")]]


@pytest.mark.parametrize("text,line", [("0", "--rounds must be at least 1 (or 'all'), not 0"),
                                       ("two", "--rounds must be a positive whole number or 'all', not 'two'")])
def test_bad_rounds_are_refused(text, line):
    with pytest.raises(Exception, match=re.escape(line)):
        from commbench.cli.links import parse_rounds
        parse_rounds(text)


# ---- attribution on the modelled cluster ------------------------------------------------------------

def simulated(n, g, leaf, plant, seed=0, rounds="default"):
    k = host_schedule.default_rounds(n, bool(leaf)) if rounds == "default" else rounds
    plants, result, *_ = sim.simulate(n, g, leaf, plant, seed, k)
    return set(plants), result


def measured_pair(n, g, leaf, seed=0, avoid=()):
    """A host pair the seed's first cross round measures (a pair-only fault is seen only where measured)."""
    layout = sim.cluster(n, g, leaf)
    inter = [r for r in host_level.first_rounds(layout, host_schedule.default_rounds(n, bool(leaf)), seed)
             if r.stage == "inter"]
    return next(p for p in inter[-1].hosts if not set(p) & set(avoid))


def failing(result):
    return {h: v for h, v in result["verdicts"].items() if v != "PASS"}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_healthy_cluster_passes_every_host(seed):
    planted, result = simulated(64, 4, 8, "", seed)
    assert result["findings"] == [] and set(result["verdicts"].values()) == {"PASS"}


@pytest.mark.parametrize("seed", range(4))
def test_each_kind_alone_is_named_and_fails_only_its_scope(seed):
    n, g, leaf = 64, 4, 8
    a, b = measured_pair(n, g, leaf, seed, avoid=("node0010", "node0020"))
    cases = {"host:node0010": {"node0010"}, "rail:node0020:2": {"node0020"}, "rx:node0030:1": {"node0030"},
             "tx:node0040:3": {"node0040"}, f"link:{a}:{b}": {a, b}, "switch:leaf3": set(names(24)[16:24]),
             "uplink:leaf5": set(names(40)[32:40])}
    assert {spec.split(":")[0] for spec in cases} == {k.split(":")[0] for k in host_findings.planted_kinds()}
    for spec, scope in cases.items():
        planted, result = simulated(n, g, leaf, spec, seed)
        assert host_findings.named(result["findings"]) == planted, (spec, result["findings"])
        bad = failing(result)
        assert set(bad) == scope, spec
        kind = spec.split(":")[0]
        assert all(v.startswith(f"FAIL {kind}: ") for v in bad.values())
        # Each finding says how many measurements agreed out of how many.
        [f] = [f for f in result["findings"] if f["kind"] == kind]
        assert 0 < f["agreed"] <= f["measured"] and f"{f['agreed']} of {f['measured']} measurements" in bad[f["hosts"][0]]
        if kind == "link":
            assert bad[a].startswith(f"FAIL link: {b}: ") and bad[b].startswith(f"FAIL link: {a}: ")


@pytest.mark.parametrize("seed", range(10))
def test_a_slow_leaf_of_three_small_leaves_is_named_alone(seed):
    """8 hosts in leaves of 3, 3 and 2: a healthy leaf whose hosts met the slow leaf's in most of their
    cross-leaf flows (confirmation partners among them) is judged on its other flows."""
    planted, result = simulated(8, 2, 3, "switch:leaf1", seed)
    assert host_findings.named(result["findings"]) == planted
    assert set(failing(result)) == set(names(3))


# A connection that keeps its path (TCP, RDMA queue pairs on ECMP; the test cluster's bonded uplinks)
# keeps a degraded uplink's slowness all run: each of its host pairs is slow both ways and again when
# measured again, as a bad cable would be (benchmarks/links_at_scale.py --hash connection).
@pytest.mark.parametrize("seed", range(6))
def test_a_small_clusters_degraded_uplink_that_connections_keep_is_named_as_the_uplink(seed):
    """8 hosts in leaves of 3, 3 and 2, every matching, one of two uplinks of leaf1 degraded: each round
    has few cross-leaf flows outside a leaf, pooled as the baseline, and the host pairs slow through the
    leaf's uplinks are its uplink, not as many links."""
    fabric = sim.Fabric(noise=0.2, uplinks=2, sticky=True)
    plants, result, *_ = sim.simulate(8, 2, 3, "uplink:leaf1", seed, None, fabric)
    assert host_findings.named(result["findings"]) == set(plants), result["findings"]
    assert set(failing(result)) == set(names(3))
    healthy = sim.simulate(8, 2, 3, "", seed, None, dataclasses.replace(fabric, ecmp=0.1))[1]
    assert set(healthy["verdicts"].values()) == {"PASS"}, healthy["findings"]


def test_at_scale_a_degraded_uplink_that_connections_keep_is_named_as_the_uplink():
    """A pair measured again is no new sample of the uplink's hash: its first measurement counts, its
    repeats do not, and the leaf's share of slow connections names it."""
    a, b = measured_pair(1000, 8, 32, avoid=("node0005", *names(256)[224:256]))
    fabric = sim.Fabric(noise=0.05, ecmp=0.05, mild=0.02, sticky=True)
    plants, result, *_ = sim.simulate(1000, 8, 32, f"host:node0005,link:{a}:{b},uplink:leaf08", 0,
                                      host_schedule.default_rounds(1000, True), fabric)
    assert host_findings.named(result["findings"]) == set(plants), host_findings.named(result["findings"])
    uplink = next(f for f in result["findings"] if f["kind"] == "uplink")
    assert "links" not in uplink and uplink["share"] > uplink["expected"] + host_verdicts.UPLINK_EXCESS


def test_between_two_leaves_a_slow_path_names_both():
    """Every cross-leaf flow joins the two leaves: the evidence cannot choose (docs/commands/links.md)."""
    planted, result = simulated(8, 2, 4, "switch:leaf1")
    assert host_findings.named(result["findings"]) == {"switch:leaf1", "switch:leaf2"}


def test_one_fault_of_each_kind_at_once_apart_is_named_exactly():
    n, g, leaf = 256, 8, 16
    a, b = measured_pair(n, g, leaf, avoid=[f"node{k:04d}" for k in (5, 100)] + names(64)[48:64])
    spec = f"host:node0005,rail:node0100:3,link:{a}:{b},switch:leaf04"
    planted, result = simulated(n, g, leaf, spec)
    assert host_findings.named(result["findings"]) == planted
    assert set(failing(result)) == {"node0005", "node0100", a, b, *names(64)[48:64]}


def test_a_fault_of_one_way_is_named_as_that_way_and_both_ways_as_the_rail():
    planted, result = simulated(64, 4, 8, "rx:node0003:1,tx:node0012:2,rx:node0021:0,tx:node0021:0")
    assert host_findings.named(result["findings"]) == {"rx:node0003:1", "tx:node0012:2", "rail:node0021:0"}
    verdict = result["verdicts"]
    assert verdict["node0003"].startswith("FAIL rx: local rank 1 receiving: ") and "healthy the other way" in verdict["node0003"]
    assert verdict["node0012"].startswith("FAIL tx: local rank 2 sending: ")
    assert verdict["node0021"].startswith("FAIL rail: local rank 0: ") and "both ways" in verdict["node0021"]


def test_every_host_sends_and_receives_on_every_rail_in_the_first_rounds():
    layout = sim.cluster(9, 2, None)
    flows = measure(layout, {}, host_level.first_rounds(layout, 3, 0))
    inter = [f for f in flows if f.a != f.b]
    for h in layout.names():
        for rail in (0, 1):
            sent = {f.b for f in inter if f.a == h and f.la == rail}
            got = {f.a for f in inter if f.b == h and f.lb == rail}
            assert sent == got and len(sent) >= 2, (h, rail)


@pytest.mark.parametrize("noise,ecmp", [(0.08, 0.0), (0.05, 0.10), (0.08, 0.10)])
def test_a_noisy_fabric_with_ecmp_collisions_and_worn_hosts_fails_no_healthy_host(noise, ecmp):
    """1,000 hosts x 8: the slowdowns of noise and collisions are measured again and do not repeat;
    hosts at 0.88 of the rate (worn, within spec) PASS."""
    fabric = sim.Fabric(noise, 0.02, ecmp, 0.02)
    plants, result, rounds, _, _ = sim.simulate(1000, 8, 32, "", 0, host_schedule.default_rounds(1000, True), fabric)
    assert set(result["verdicts"].values()) == {"PASS"}, failing(result)
    transient = [f for f in result["findings"] if f["kind"] == "transient"]
    assert transient and [f for f in result["findings"] if f["kind"] != "transient"] == []
    assert all(f["measured"] >= 2 and f["agreed"] < f["measured"] for f in transient)
    assert len(rounds) <= 2 * 14


def test_a_slowdown_that_does_not_repeat_is_a_transient_and_passes():
    """node0005's rail 1 receives slowly in the first rounds alone (a passing load): measured again
    against three healthy partners, healthy: a transient, with its counts, and a PASS."""
    layout = sim.cluster(32, 2, None)
    model = sim.Model(layout, {}, sim.Fabric(), 0)

    def rate(flow, rng):
        once = flow.stage == "inter" and flow.dst_host == "node0005" and flow.dst_local == 1
        return model.rate(flow, rng) * (0.3 if once else 1)

    sim_ = sim.Simulation(layout, rate, 0)
    flows = [f for r in host_level.first_rounds(layout, 3, 0) for f in sim_.measure(r)]
    again = host_level.confirm_rounds(layout, flows, 0, 0.75, ("bandwidth_gbps",))
    flows += [f for r in again for f in sim_.measure(r)]
    result = host_level.judge(layout, flows, 0.75, ("bandwidth_gbps",))
    assert set(result["verdicts"].values()) == {"PASS"}
    [found] = result["findings"]
    assert (found["kind"], found["subject"], found["agreed"], found["measured"]) == \
        ("transient", "node0005:1 rx", 0, host_verdicts.CONFIRMATIONS)
    assert host_findings.evidence(found, "node0005") == (
        "transient: node0005:1 rx: slow in the first rounds, 0 of 3 measurements slow when measured again in light "
        "rounds: not repeated")


def test_the_confirmation_rounds_are_light():
    layout = sim.cluster(256, 2, 16)
    fabric = sim.Fabric(0.08, 0.02, 0.2, 0.05)
    flows = measure(layout, {}, host_level.first_rounds(layout, 4, 0), fabric=fabric)
    again = host_level.confirm_rounds(layout, flows, 0, 0.75, ("bandwidth_gbps",))
    assert again and max(len(r.hosts) for r in again) == host_schedule.light_pairs(256) == 16


def test_a_worn_host_of_a_small_leaf_is_no_uplink():
    """A leaf's excess of slow flows must hold without its worst host: an uplink slows all alike."""
    layout = sim.cluster(40, 4, 8)
    model = sim.Model(layout, {}, sim.Fabric(0.05), 0)

    def rate(flow, rng):  # node0003 at 70 %: its flows sit at the threshold, half of them below
        worn = "node0003" in (flow.src_host, flow.dst_host) and flow.src_host != flow.dst_host
        return model.rate(flow, rng) * (0.7 if worn else 1)

    sim_ = sim.Simulation(layout, rate, 0)
    flows = [f for r in host_level.first_rounds(layout, 4, 0) for f in sim_.measure(r)]
    result = host_level.judge(layout, flows, 0.75, ("bandwidth_gbps",))
    assert not [f for f in result["findings"] if f["kind"] == "uplink"], result["findings"]


@pytest.mark.parametrize("k,n,p", [(0, 5, 0.3), (3, 5, 0.3), (5, 5, 0.3), (6, 5, 0.3), (2, 40, 0.01), (1, 4, 0.0)])
def test_binomial_tail_is_the_sum_of_the_terms(k, n, p):
    from math import comb
    exact = sum(comb(n, j) * p ** j * (1 - p) ** (n - j) for j in range(k, n + 1))
    assert host_verdicts.binomial_tail(k, n, p) == pytest.approx(exact, rel=1e-9, abs=1e-300)


@pytest.mark.parametrize("env,nic", [
    ({"UCX_NET_DEVICES": "mlx5_3:1"}, "mlx5_3"), ({"NCCL_IB_HCA": "mlx5_2"}, "mlx5_2"),
    # NCCL matches a prefix: mlx5_1 takes mlx5_10 and mlx5_11 too; '=' asks for the name alone.
    ({"NCCL_IB_HCA": "mlx5_1"}, None), ({"NCCL_IB_HCA": "=mlx5_1:1"}, "mlx5_1"), ({"NCCL_IB_HCA": "mlx5_4"}, None),
    ({"NCCL_SOCKET_IFNAME": "ens"}, "ens7"), ({"NCCL_SOCKET_IFNAME": "eth"}, None), ({"NCCL_SOCKET_IFNAME": "e"}, None),
    ({"OMPI_MCA_btl_tcp_if_include": "eth1"}, "eth1"), ({"NCCL_IB_HCA": "mlx5_0,mlx5_1"}, None),
    ({"NCCL_IB_HCA": "^mlx5_0"}, None), ({"NCCL_IB_HCA": "^=mlx5_0"}, None),
    ({"OMPI_MCA_btl_tcp_if_include": "10.0.0.0/24"}, None), ({}, None)])
def test_the_nic_a_launch_pins_a_rank_to(env, nic):
    from commbench.node.machine import pinned_nic
    devices = {"/sys/class/infiniband": ["mlx5_0", "mlx5_1", "mlx5_10", "mlx5_11", "mlx5_2", "mlx5_3"],
               "/sys/class/net": ["eth0", "eth1", "ens7", "lo"]}
    assert pinned_nic(env, devices.__getitem__) == nic


def test_a_rail_fault_is_named_with_its_nic_where_the_launch_names_it():
    layout = sim.cluster(16, 2, None)
    flows = measure(layout, {"rail:node0003:1": 0.3}, host_level.first_rounds(layout, 3, 0))
    ratio, _ = host_verdicts.ratios(flows, ("bandwidth_gbps",))
    found = host_verdicts.attribute(flows, ratio, layout.names(), 0.75, nics={("node0003", 1): "mlx5_1"})
    assert [(f["kind"], f["subject"], f["nic"]) for f in found] == [("rail", "node0003:1", "mlx5_1")]
    assert host_findings.evidence(found[0], "node0003").startswith("rail: local rank 1 (mlx5_1): ")


def test_the_nic_nccl_sent_through_is_read_from_its_log():
    from commbench.transports.nccl import used_nic
    log = ("h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_10:1/RoCE ; OOB ib0:10.0.0.1<0>\n"
           "h:1:2 [1] NCCL INFO Channel 00/0 : 1[1] -> 9[1] [send] via NET/IB/1/GDRDMA\n"
           "h:1:2 [1] NCCL INFO Channel 01/0 : 1[1] -> 9[1] [send] via NET/IB/1(3)/GDRDMA/Shared\n"
           "h:1:2 [1] NCCL INFO Channel 00/0 : 9[1] -> 1[1] [receive] via NET/IB/2/GDRDMA\n"
           "h:1:2 [1] NCCL INFO Channel 02/0 : 1[1] -> 17[1] [send] via NET/IB/2/GDRDMA\n")
    assert used_nic(log) == "mlx5_1"
    assert used_nic("NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0> [1]eth1:10.0.1.1<0>\n"
                    "NCCL INFO Channel 00/0 : 0[0] -> 2[0] [send] via NET/Socket/1\n") == "eth1"
    assert used_nic("NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct\n") is None and used_nic(None) is None


def test_a_nic_that_every_rank_of_a_host_names_names_no_rail():
    """A site-wide NCCL_SOCKET_IFNAME=bond0 says nothing of which rail is which; one rank a host does."""
    from commbench.analysis.host.report import rail_nics
    assert rail_nics(sim.cluster(2, 2, None), ["bond0", "bond0", "mlx5_0", "mlx5_1"]) == {
        ("node0002", 0): "mlx5_0", ("node0002", 1): "mlx5_1"}
    assert rail_nics(sim.cluster(2, 1, None), ["bond0", "bond0"]) == {("node0001", 0): "bond0", ("node0002", 0): "bond0"}


def test_flows_far_below_the_nic_say_that_a_half_rate_nic_cannot_be_seen():
    """The typical flow between hosts under 60 % of rank 0's fastest NIC (its topology snapshot): a NIC
    at half rate would read healthy, and the section and the output say so."""
    from commbench.analysis.host.report import lines, nic_rate_gbps, report
    topology = {"host": {"infiniband": [{"hca": "mlx5_0", "port": 1, "rate_gbps": 400.0}, {"hca": "mlx5_1", "port": 1,
                                                                                       "rate_gbps": None}],
                         "nics": [{"name": "eth0", "type": "ethernet", "speed_mbps": 100000, "virtual": False},
                                  {"name": "veth1", "type": "ethernet", "speed_mbps": 800000, "virtual": True}]}}
    assert nic_rate_gbps(topology) == 50.0 and nic_rate_gbps(None) is None and nic_rate_gbps({"host": {}}) is None
    layout = sim.cluster(8, 2, None)
    first = host_level.first_rounds(layout, 3, 0)
    flows = measure(layout, {}, first)  # inter-host flows at about 48 GB/s
    settings = {"level": "host", "latency_size": 8, "bandwidth_size": 1 << 22, "threshold_pct": 75.0,
                "judged": ["bandwidth_gbps"], "seed": 0, "rounds_asked": 3, "topology": None, "intra": True,
                "nccl_channels": {"coll": 32, "collnet": 32, "nvls": 0, "p2p": 32, "p2p_per_peer": 1}}
    from commbench.analysis.host.report import round_rows
    assert not report("nccl", layout, settings, flows, round_rows(first), nic_gbps=50.0)["below_nic"]
    slow = [host_verdicts.Flow(f.stage, f.a, f.b, f.la, f.lb, f.bandwidth_gbps / 4 if f.a != f.b else f.bandwidth_gbps,
                               None, f.round) for f in flows]
    section = report("nccl", layout, settings, slow, round_rows(first), nic_gbps=50.0)
    assert section["below_nic"] and section["nic_gbps"] == 50.0
    [warning] = [line for line in lines(section) if line.startswith("# warning:")]
    assert re.fullmatch(r"# warning: the typical flow between hosts, [\d.]+ GB/s, is 2\d % of the NIC's 50 GB/s: a NIC "
                        r"at half its rate stays above the threshold and cannot be told from a healthy one \(NCCL gave "
                        r"each peer 1 channel\(s\)\)", warning), warning


def test_a_lost_host_reads_fail_lost_and_its_flows_judge_nobody():
    layout = sim.cluster(8, 1, None)
    flows = measure(layout, {}, host_level.first_rounds(layout, 3, 0))
    result = host_level.judge(layout, flows, 0.75, ("bandwidth_gbps",), lost={"node0004": "rank 3 ended in round 2"})
    assert failing(result) == {"node0004": "FAIL lost: rank 3 ended in round 2"}


def test_a_host_that_met_no_other_reads_fail_untested():
    """5 hosts, one round: one host sits it out and was not shown good."""
    planted, result = simulated(5, 2, None, "", rounds=1)
    assert list(failing(result).values()) == ["FAIL untested: no flow with another host was measured"]


def test_one_slow_measurement_of_a_host_pair_is_no_link():
    """A pair met once, slow both ways once (a passing load): named only where measured again and slow
    again; slow once more of three, it is a transient, reported and no FAIL."""
    met = [("a", "b", 10.0), ("c", "d", 10.0), ("a", "c", 10.0), ("b", "d", 3.0), ("a", "d", 10.0), ("b", "c", 10.0)]
    flows = [host_verdicts.Flow("inter", x, y, 0, 0, bw, None, k // 2) for k, (a, b, bw) in enumerate(met)
             for x, y in ((a, b), (b, a))]

    def judged(more):
        ratio, _ = host_verdicts.ratios(flows + more, ("bandwidth_gbps",))
        found = host_verdicts.attribute(flows + more, ratio, ["a", "b", "c", "d"], 0.75)
        return [(f["kind"], f["subject"], f["agreed"], f["measured"]) for f in found]

    assert judged([]) == []
    again = [host_verdicts.Flow("confirm", x, y, 0, 0, bw, None, 3 + k) for k, bw in enumerate((3.0, 3.1, 2.9))
             for x, y in (("b", "d"), ("d", "b"))]
    assert judged(again) == [("link", "b-d", 6, 6)]
    once = [host_verdicts.Flow("confirm", x, y, 0, 0, bw, None, 3 + k) for k, bw in enumerate((3.0, 10.0, 9.9))
            for x, y in (("b", "d"), ("d", "b"))]
    assert judged(once) == [("transient", "b-d:0", 2, 6)]


def test_a_host_whose_slow_flows_went_to_a_bad_receiver_is_not_failed_on_them():
    """f receives at a quarter of the rate; e sent to f and, once, to c in a round that collided, and
    no healthy partner was left to measure e again: the first rounds' flows that judge e are the two
    slow ones, one of which f's fault explains. Judged on them e read 'tx: 2 of 2 measurements slow
    with 2 partners' and was failed beside f (8 hosts, a fifth of the rate on one host's rail, under a
    loaded CI run). A flow whose other end is itself a suspect is evidence against neither."""
    met = [[("a", "b"), ("c", "d"), ("e", "f")], [("a", "f"), ("c", "e"), ("b", "d")], [("a", "c"), ("b", "f")]]
    slow = {("e", "f"), ("a", "f"), ("b", "f"), ("e", "c")}
    flows = [host_verdicts.Flow("inter", x, y, 0, 0, 2.5 if (x, y) in slow else 10.0, None, k)
             for k, pairs in enumerate(met) for a, b in pairs for x, y in ((a, b), (b, a))]
    # f measured again by three healthy partners, still slow; e by none.
    flows += [host_verdicts.Flow("confirm", x, "f", 0, 0, 2.5, None, 3 + k) for k, x in enumerate("abc")]
    flows += [host_verdicts.Flow("confirm", "f", x, 0, 0, 10.0, None, 3 + k) for k, x in enumerate("abc")]
    ratio, _ = host_verdicts.ratios(flows, ("bandwidth_gbps",))
    found = host_verdicts.attribute(flows, ratio, list("abcdef"), 0.75)
    assert [(f["kind"], f["subject"]) for f in found if f["kind"] != "transient"] == [("host", "f")], found


def test_a_slow_pair_of_the_first_rounds_is_measured_again():
    layout = sim.cluster(16, 2, None)
    a, b = measured_pair(16, 2, None)
    flows = measure(layout, {f"link:{a}:{b}": 0.3}, host_level.first_rounds(layout, 3, 0))
    confirm = host_level.confirm_rounds(layout, flows, 0, 0.75, ("bandwidth_gbps",))
    assert [p for r in confirm for p in r.hosts].count((a, b)) == host_verdicts.CONFIRMATIONS


def test_verdict_lines_have_one_line_per_host_in_the_published_form():
    planted, result = simulated(32, 2, None, "host:node0003,rail:node0007:1")
    lines = host_findings.verdict_lines(result["verdicts"])
    assert [VERDICT.match(x).group(1) for x in lines] == names(32)
    assert re.fullmatch(r"node0003 \| FAIL host: \d+ % of the typical flow on every rail \(2\), (\d+) of \1 "
                        r"measurements slow with \d+ partners", lines[2]), lines[2]
    # "; " joins a host's findings: no evidence holds one.
    planted, mixed = simulated(64, 4, 8, f"host:node0010,rail:node0020:2,link:{':'.join(measured_pair(64, 4, 8))},switch:leaf3")
    assert all(";" not in host_findings.evidence(f, h) for f in mixed["findings"] for h in f["hosts"])
    joined = host_findings.verdicts([{"kind": "lost", "hosts": ["a"], "why": "x", "subject": "a"},
                                     {"kind": "lost", "hosts": ["a"], "why": "y", "subject": "a"}], ["a", "b"])
    assert joined == {"a": "FAIL lost: x; lost: y", "b": "PASS"}


def test_the_section_grows_with_hosts_times_rounds_not_their_square():
    sizes = {}
    for n in (64, 512):
        layout = sim.cluster(n, 2, None)
        first = host_level.first_rounds(layout, 3, 0)
        flows = measure(layout, {"host:node0002": 0.3}, first)
        from commbench.analysis.host.report import report, round_rows
        settings = {"level": "host", "latency_size": 8, "bandwidth_size": 1 << 22, "threshold_pct": 75.0,
                    "judged": ["bandwidth_gbps"], "seed": 0, "rounds_asked": 3, "topology": None}
        sizes[n] = len(json.dumps(report("mpi", layout, settings, flows, round_rows(first))))
    assert sizes[512] / sizes[64] < 8 * 1.5, sizes


# ---- the simulation as a user runs it -----------------------------------------------------------------

def test_links_at_scale_names_the_planted_faults_at_a_thousand_hosts():
    a, b = measured_pair(1000, 8, 32, avoid=("node0005", "node0100", "node0300", *names(224)[192:224],
                                             *names(512)[480:512]))
    plant = f"host:node0005,rail:node0100:3,rx:node0300:6,link:{a}:{b},switch:leaf07,uplink:leaf16"
    r = subprocess.run([sys.executable, BENCH, "--hosts", "1000", "--ranks-per-host", "8", "--leaf-size", "32",
                        "--plant", plant], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    last = r.stdout.splitlines()[-1]
    specs = ", ".join(sorted(plant.split(",")))
    assert re.fullmatch(rf"planted: {specs} \| named: {specs} \| rounds \d+ \| flows \d+ \| measuring [\d.]+ s \| "
                        r"compute [\d.]+ s", last), last


def test_links_at_scale_mixes_on_a_noisy_fabric_name_every_fault_and_no_healthy_host():
    """One cell of the grid docs/commands/links.md carries: each mix one fault of every kind planted apart."""
    r = subprocess.run([sys.executable, BENCH, "--hosts", "1000", "--ranks-per-host", "8", "--leaf-size", "32",
                        "--mixes", "2", "--noise", "0.08", "--ecmp", "0.1", "--mild", "0.02", "--seed", "5"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [line for line in r.stdout.splitlines() if line.startswith("| 1000 x 8 |")]
    assert len(rows) == 2 and all("| yes | - | - | - |" in row for row in rows), rows
    assert re.fullmatch(r"1000 hosts x 8 ranks in leaves of 32, noise 8 %, intra 2 %, ecmp 10 %, mild 2 %: runs 2 \| "
                        r"named exactly 2 \| healthy hosts FAILed 0 \(in 0 runs\) \| faults missed 0 \(in 0 runs\) \| "
                        r"rounds <= \d+ \| measuring <= [\d.]+ s \| compute <= [\d.]+ s", r.stdout.splitlines()[-1])


def test_links_at_scale_runs_a_model_file_and_compares_with_what_it_plants():
    model = os.path.join(os.path.dirname(BENCH), "fabric_model.py")
    r = subprocess.run([sys.executable, BENCH, "--hosts", "320", "--ranks-per-host", "8", "--leaf-size", "32",
                        "--model", model], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1].startswith("planted: rx:node0007:2, uplink:leaf03 | named: rx:node0007:2, "
                                                "uplink:leaf03 | rounds ")


@pytest.mark.parametrize("text,line", [
    ("def rate(flow, rng):\n    return 1.0\n", "it must define rate(flow, rng) and PLANTED, a list of --plant specs"),
    ("PLANTED = ['rail:node0001:9']\ndef rate(flow, rng):\n    return 1.0\n", "PLANTED rail:node0001:9: not a "),
])
def test_links_at_scale_refuses_a_model_file_it_cannot_use(text, line, workdir):
    path = os.path.join(workdir, "model.py")
    with open(path, "w") as f:
        f.write(text)
    r = subprocess.run([sys.executable, BENCH, "--hosts", "10", "--ranks-per-host", "2", "--model", path],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.startswith(f"links_at_scale: error: --model {path}: {line}"), r.stderr
    assert len(r.stderr.splitlines()) == 1


def test_links_at_scale_refuses_a_fault_the_cluster_does_not_have():
    r = subprocess.run([sys.executable, BENCH, "--hosts", "10", "--ranks-per-host", "2", "--plant", "rail:node0003:2"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.startswith("links_at_scale: error: --plant rail:node0003:2: ")
    assert len(r.stderr.splitlines()) == 1


# ---- the command ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("args,line", [
    (["--rounds", "0"], "--rounds must be at least 1 (or 'all'), not 0"),
    (["--rounds", "\uff13"], "--rounds must be a positive whole number or 'all', not '\uff13'"),
    (["--topology", ""], "--topology '': give the path of Slurm's topology.conf, or leave the option out"),
    (["--seed", "1" + "0" * 39], "Invalid value for '--seed': 1" + "0" * 39 + " is not in the range "
                                 "0<=x<=9223372036854775807."),
    (["--level", "host", "--np", "2"], "--level host needs ranks on two hosts or more: a standalone run's ranks are "
                                       "all on this one; launch across hosts (mpirun, srun, torchrun)"),
    (["--level", "rank", "--seed", "2"], "--rounds, --seed, --topology, --no-intra and --nic-rate apply to --level "
                                         "host (or auto across hosts), not rank"),
    (["--np", "2", "--rounds", "99999999"], "--rounds, --seed, --topology, --no-intra and --nic-rate apply at host "
                                            "level, and a standalone run's ranks are all on this one host: launch "
                                            "across hosts (mpirun, srun, torchrun)"),
    (["--level", "host", "--nic-rate", "shm"], "--nic-rate shm: give a rate in GB/s or a fabric of the catalog: " +
     ", ".join(n for n in fabrics.catalog() if not fabrics.measured_here(n))),
    (["--nic-rate", "-3"], "--nic-rate -3: a rate in GB/s is a positive number"),
    (["--nic-rate", "nan"], "--nic-rate nan: a rate in GB/s is a positive number"),
])
def test_bad_host_level_input_is_one_line_before_any_rank(args, line, workdir):
    r = commbench(["links", *args], cwd=workdir)
    assert r.returncode == 2 and r.stderr == f"commbench: error: {line}\n", r.stderr
    assert not os.listdir(workdir)


def test_a_host_level_file_whose_rows_do_not_match_its_section_is_one_line(workdir):
    layout = sim.cluster(4, 1, None)
    from commbench.analysis.host.report import report, round_rows
    first = host_level.first_rounds(layout, 3, 0)
    settings = {"level": "host", "latency_size": 8, "bandwidth_size": 1 << 20, "threshold_pct": 75.0,
                "judged": ["bandwidth_gbps"], "seed": 0, "rounds_asked": 3, "topology": None, "intra": True}
    section = report("mpi", layout, settings, measure(layout, {}, first), round_rows(first))
    from docs import record, result_doc
    rows = [record("bandwidth", "mpi", "uint8", "none", 4, 1 << 20, 1 << 20, [1e-3] * 3, 0, pair=[0, 9],
                   window=2, schedule="inter")]
    doc = {**result_doc([]), "links": section, "results": rows}
    path = os.path.join(workdir, "edited.json")
    with open(path, "w") as f:
        json.dump(doc, f)
    # Judged again, or read as one of a fleet's files: the same one line.
    for args in (["links", "--from", path], ["fleet", path]):
        r = commbench(args, cwd=workdir)
        assert r.returncode == 2 and r.stderr.startswith(f"commbench: error: {path}: its rows and links section do "
                                                         "not match") and r.stderr.count("\n") == 1, (args, r.stderr)
    # What measures, or what host level does not read, is refused by name rather than dropped.
    for extra, named in ((["--rounds", "0", "--topology", "missing.conf"], "--rounds, --topology do"),
                         (["--level", "rank"], "--level does"), (["--mad-z", "3.5"], "--mad-z does")):
        r = commbench(["links", "--from", path, *extra], cwd=workdir)
        assert r.returncode == 2 and r.stderr == (f"commbench: error: --from judges {path} again and measures "
                                                  f"nothing: {named} not apply to it (it reads --threshold-pct and "
                                                  "--judge)\n"), r.stderr


def _four_host_section() -> tuple[dict, list]:
    """A host-level section of 4 modelled hosts, 3 rounds, and its first round's 4 bandwidth rows."""
    layout = sim.cluster(4, 1, None)
    from commbench.analysis.host.report import report, round_rows
    first = host_level.first_rounds(layout, 3, 0)
    settings = {"level": "host", "latency_size": 8, "bandwidth_size": 1 << 20, "threshold_pct": 75.0,
                "judged": ["bandwidth_gbps"], "seed": 0, "rounds_asked": 3, "topology": None, "intra": False}
    from docs import record
    rows = [record("bandwidth", "mpi", "uint8", "none", 4, 1 << 20, 1 << 20, [1e-3] * 3, 0, pair=list(pair),
                   window=2, schedule="inter", round=0) for pair in ((0, 1), (1, 0), (2, 3), (3, 2))]
    return report("mpi", layout, settings, measure(layout, {}, first), round_rows(first), rows=rows), rows


def test_a_host_level_file_whose_figures_were_edited_is_not_judged_again(workdir):
    """The section keeps a digest of what its rows say of the flows: `links --from` and fleet judged an
    edited figure again without complaint; they refuse it now, and judge the file as written."""
    from docs import result_doc
    section, rows = _four_host_section()
    path = os.path.join(workdir, "run.json")
    for figure in (None, 2 * rows[0]["algbw_gbps"]):
        if figure is not None:
            rows[0]["algbw_gbps"] = figure
        with open(path, "w") as f:
            json.dump({**result_doc([]), "links": section, "results": rows}, f)
        for args in (["links", "--from", path], ["fleet", path]):
            r = commbench(args, cwd=workdir)
            if figure is None:
                assert r.returncode in (0, 1) and not r.stderr, (args, r.stderr)
            else:
                assert r.returncode == 2 and r.stderr == (
                    f"commbench: error: {path}: its rows are not those the run judged (their digest differs from the "
                    "links section's rows_digest): the figures were changed since, and are not judged again\n"), r.stderr


def test_a_finding_of_no_kind_is_refused_by_every_reader(workdir):
    """The schema's kinds of finding are the registry's (commbench/results/findings.py, injected when the
    schema loads): a file naming another kind is refused when read, by name, not a KeyError in a
    verdict's text."""
    from commbench.results.document import schema
    from commbench.results.findings import ORDER
    assert schema()["$defs"]["links_host"]["properties"]["findings"]["items"]["properties"]["kind"]["enum"] == ORDER
    from docs import result_doc
    section, rows = _four_host_section()
    section["findings"] = [{"kind": "bogus", "subject": "node0001", "hosts": ["node0001"]}]
    path = os.path.join(workdir, "run.json")
    with open(path, "w") as f:
        json.dump({**result_doc([]), "links": section, "results": rows}, f)
    for args in (["links", "--from", path], ["export", path], ["fleet", path]):
        r = commbench(args, cwd=workdir)
        assert r.returncode == 2 and r.stderr.startswith(f"commbench: error: {path}: invalid field 'links/findings/0/kind': "
                                                         "'bogus' is not one of ['lost', 'untested',"), (args, r.stderr)


def test_a_bad_topology_file_is_one_line_naming_its_line(workdir):
    path = os.path.join(workdir, "topology.conf")
    with open(path, "w") as f:
        f.write("SwitchName=leaf1 Nodes=node[001-004]\nSwitchName=leaf2 Nodez=node[005-008]\n")
    r = commbench(["links", "--topology", path], cwd=workdir)
    assert r.returncode == 2 and r.stderr.startswith(f"commbench: error: {path}:2: ") and r.stderr.count("\n") == 1
    assert os.listdir(workdir) == ["topology.conf"]


# Ground truth across namespace hosts, 2 ranks each: bandwidth is what tbf shapes (see test_links.py).
# The pairs inside a host are shared memory on the 2 cores, which 4 pairs at once share unevenly (a
# healthy host's pair read 65 % of the typical one, the test alone on the machine): judged on the
# flows between hosts (--no-intra); the emulated GPUs' functional run below measures the inside too.
CLUSTER = ["links", "--level", "host", "--judge", "bandwidth", "--bandwidth-size", "1M", "--window", "2",
           "--budget-ms", "50", "--min-iters", "3", "--warmup", "1"]
INTER = [*CLUSTER, "--no-intra"]


@pytest.mark.cluster
@pytest.mark.mpi
@pytest.mark.quiet
def test_host_level_names_the_host_shaped_to_a_third_and_judges_again(make_cluster, workdir):
    c = make_cluster(4, rates=[300, 300, 100, 300])
    out = os.path.join(workdir, "links.json")
    r = c.mpirun([COMMBENCH, *INTER, "-o", out], ranks_per_host=2, timeout=240, cwd=workdir, export=FLOW_WAITS)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    slow = c.hosts[2].name
    verdicts = [line for line in r.stdout.splitlines() if VERDICT.match(line)]
    assert [VERDICT.match(x).group(1) for x in verdicts] == [h.name for h in c.hosts]
    assert [x for x in verdicts if "FAIL" in x] == [x for x in verdicts if x.startswith(f"{slow} | FAIL host: ")]
    doc = results.load_document(out)
    s = doc["links"]
    assert s["level"] == "host" and [f["subject"] for f in s["findings"]] == [slow] and s["rows_digest"]
    assert {x["schedule"] for x in doc["results"]} <= set(host_level.STAGES) and all(x["wrong"] == 0 for x in doc["results"])
    # Every host pair of 4 hosts in the default rounds, rank i with rank i, 2 ranks per host, both ways.
    inter = [tuple(x["pair"]) for x in doc["results"] if x["schedule"] == "inter" and x["op"] == "bandwidth"]
    hosts = s["hosts"]
    local = [hosts[:r].count(hosts[r]) for r in range(len(hosts))]
    assert len(inter) == 6 * 2 * 2 and all(hosts[a] != hosts[b] and local[a] == local[b] for a, b in inter)
    assert set(inter) == {(b, a) for a, b in inter}
    assert len({frozenset((hosts[a], hosts[b])) for a, b in inter}) == 6
    # fleet: each host's figures from the flows, and the verdicts beside them.
    fleet = commbench(["fleet", out, "--json"], cwd=workdir)
    assert fleet.returncode == 1, fleet.stderr
    found = json.loads(fleet.stdout)
    assert sorted(found["nodes"]) == sorted(h.name for h in c.hosts)
    inter = {h: n["metrics"]["links inter-host bandwidth (GB/s)"] for h, n in found["nodes"].items()}
    assert min(inter, key=inter.get) == slow
    assert {h: [v["verdict"][:9] for v in vs] for h, vs in found["verdicts"].items()} == {
        h.name: ["FAIL host" if h.name == slow else "PASS"] for h in c.hosts}
    text = commbench(["fleet", out], cwd=workdir).stdout
    assert "# links verdicts (host level): 3 of 4 host(s) PASS" in text and f"\n{slow} | FAIL host: " in text
    again = commbench(["links", "--from", out, "--judge", "bandwidth", "--threshold-pct", "20"], cwd=workdir)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "# no slow host, rail, link or switch found" in again.stdout


@pytest.mark.cluster
@pytest.mark.mpi
def test_a_topology_that_misses_the_hosts_is_one_line_before_measuring(make_cluster, workdir):
    c = make_cluster(2)
    path = os.path.join(workdir, "topology.conf")
    with open(path, "w") as f:
        f.write("SwitchName=leaf1 Nodes=other[1-2]\n")
    r = c.mpirun([COMMBENCH, *CLUSTER, "--topology", path, "-o", os.path.join(workdir, "x.json")], ranks_per_host=1,
                 timeout=120, cwd=workdir)
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    assert f"commbench: error: the hosts do not match the topology {path}: " in r.stderr
    assert not os.path.exists(os.path.join(workdir, "x.json"))


# The cluster of rails and leaves: 8 hosts of 2 ranks, local rank i on rail i (its own interface),
# leaves of 3, 3 and 2 hosts under a spine. A fault is 15 % of the healthy 200 Mbit/s and a flow
# slow below half of the typical one: on 2 cores shared by 16 ranks, scheduling moves a healthy flow
# by up to a third, and with the bonded uplinks' collisions the run's noise reads 20-40 %, under which
# a suspect measured twice again must stay below 0.25 of the typical flow (MARGIN_Z; a fault of a fifth
# read 0.27 at 39 % and was missed). The rank pairs inside a host are shared memory, the cores' and not the links'
# (--no-intra): with every flow link-bound, a host's, a rail's and a pair's fault are named beside
# other tests' load too (beside three busy loops, and two other workers), so they run with the other
# worker, not alone. Each leaf's uplink is a bond of two members of MEMBER Mbit/s hashing TCP
# connections (cluster.py bond_uplinks): a leaf's 6 flows of a cross-leaf round (1.2 Gbit/s) fit the two
# members, but not one, so that connections collide as on ECMP, all run. The switch's fault is the bond
# at 200 Mbit/s in all; the uplink's, one member at DEGRADED. A window of one 1 MiB message (42 ms at
# the healthy rate) keeps the 13 runs of these tests near 200 s (330 s with two).
RAILS = ["links", "--level", "host", "--judge", "bandwidth", "--bandwidth-size", "1M", "--window", "1",
         "--budget-ms", "50", "--min-iters", "3", "--warmup", "1", "--threshold-pct", "50", "--no-intra"]
HEALTHY, FAULT, UPLINK, MEMBER, DEGRADED = 200, 30, 200, 400, 80


@pytest.fixture(scope="module")
def rails_cluster():
    from cluster import Cluster, ClusterUnavailable
    c = Cluster(8, HEALTHY, rails=2, leaves=[3, 3, 2])
    try:
        c.__enter__()
    except ClusterUnavailable as e:
        pytest.skip(str(e))
    try:
        c.bond_uplinks(MEMBER)
        yield c
    finally:
        c.teardown()


def _topology(c, workdir) -> str:
    """The cluster's leaves as a topology.conf in workdir: its path."""
    path = os.path.join(workdir, "topology.conf")
    with open(path, "w") as f:
        f.write(c.topology_conf())
    return path


def _measured_pair(c):
    """A cross-leaf host pair of the default rounds (a pair-only fault shows where it is measured)."""
    from commbench.analysis.topology import Topology
    names = [h.name for h in c.hosts]
    topo = Topology.from_leaves({f"leaf{j}": [h.name for h in c.hosts if h.leaf == j] for j in range(3)})
    layout = host_level.Layout([h for h in names for _ in range(2)], topo.leaf_of)
    inter = [r for r in host_level.first_rounds(layout, host_schedule.default_rounds(8, True), 0) if r.stage == "inter"]
    a, b = inter[-1].hosts[0]
    return names.index(a), names.index(b)


FAULTS = {
    "host": (lambda c: c.shape(1, FAULT), lambda c: {1: "host"}),
    # Named with its NIC: each rank's launch pins it to its rail's interface (btl_tcp_if_include).
    "rail": (lambda c: c.shape(4, FAULT, rail=1), lambda c: {4: "rail: local rank 1 (eth1): "}),
    # Only what the host receives on rail 0: every host sends and receives on every rail.
    "rx": (lambda c: c.shape(6, FAULT, rail=0, way="rx"), lambda c: {6: "rx: local rank 0 (eth0) receiving: "}),
    "link": (lambda c: c.shape_pair(*_measured_pair(c), FAULT),
             lambda c: {i: f"link: {c.hosts[j].name}" for i, j in (_measured_pair(c), _measured_pair(c)[::-1])}),
    "switch": (lambda c: c.shape_uplink(0, UPLINK), lambda c: {i: "switch: leaf0" for i in range(3)}),
}


@pytest.mark.cluster
@pytest.mark.mpi
# The uplink's fault alone runs alone: its cross-leaf rounds load every host, and beside two other
# workers' tests (pytest -n 3) healthy hosts' flows read as slow links.
@pytest.mark.parametrize("fault", [pytest.param(f, marks=pytest.mark.quiet) if f == "switch" else f for f in FAULTS])
def test_rails_and_leaves_name_each_fault_as_its_kind_and_no_other_host(fault, rails_cluster, workdir):
    c = rails_cluster
    c.reset()
    plant, expect = FAULTS[fault]
    plant(c)
    out = os.path.join(workdir, "links.json")
    start = time.monotonic()
    r = c.mpirun([COMMBENCH, *RAILS, "--topology", _topology(c, workdir), "-o", out], ranks_per_host=2, timeout=300,
                 cwd=workdir, export=FLOW_WAITS)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    verdicts = results.load_document(out)["links"]["verdicts"]
    failed = {name: v for name, v in verdicts.items() if v != "PASS"}
    wanted = {c.hosts[i].name: kind for i, kind in expect(c).items()}
    assert set(failed) == set(wanted), (fault, failed, time.monotonic() - start)
    assert all(failed[h].startswith(f"FAIL {kind}") and ";" not in failed[h] for h, kind in wanted.items()), failed


# Contention that is no fault: the connections that share a bonded uplink's member collide, each in the
# rounds where they run together, and the confirmation rounds tell a collision from a fault (runs of
# the default rounds, 9 to 19 s each; 26 of 26 passed, 10 of them with windows of 2 messages: the
# closest, a colliding pair whose light measurements had a median of 0.45 of the typical flow, which
# MARGIN_Z under the run's 28 % noise takes to 0.60, above the threshold of 0.5). Two seeds, two
# matchings of the rounds: each run also loads the whole suite's two cores for its length.
@pytest.mark.cluster
@pytest.mark.mpi
@pytest.mark.parametrize("seed", range(2))
def test_a_contended_healthy_cluster_fails_no_host(seed, rails_cluster, workdir):
    c = rails_cluster
    c.reset()
    before = c.member_bytes(0)
    out = os.path.join(workdir, "links.json")
    r = c.mpirun([COMMBENCH, *RAILS, "--seed", str(seed), "--topology", _topology(c, workdir), "-o", out],
                 ranks_per_host=2, timeout=300, cwd=workdir, export=FLOW_WAITS)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert set(results.load_document(out)["links"]["verdicts"].values()) == {"PASS"}
    # Both members carried the leaf's flows: the bond hashes them.
    assert all(after - b > 2 << 20 for after, b in zip(c.member_bytes(0), before)), (before, c.member_bytes(0))


# One member degraded: every matching of the 8 hosts is measured (--rounds all), which gives a leaf's
# uplink about 30 connections of the first rounds, where the default 4 rounds give it 12, too few to
# tell one member degraded from chance (a connection keeps its member all run, so its repeats are no
# new sample).
@pytest.mark.cluster
@pytest.mark.mpi
def test_one_degraded_member_of_a_bonded_uplink_is_named_as_the_leafs_uplink(rails_cluster, workdir):
    c = rails_cluster
    c.reset()
    c.shape_member(0, 1, DEGRADED)
    out = os.path.join(workdir, "links.json")
    r = c.mpirun([COMMBENCH, *RAILS, "--rounds", "all", "--topology", _topology(c, workdir), "-o", out],
                 ranks_per_host=2, timeout=300, cwd=workdir, export=FLOW_WAITS)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    verdicts = results.load_document(out)["links"]["verdicts"]
    failed = {name: v for name, v in verdicts.items() if v != "PASS"}
    assert set(failed) == {h.name for h in c.hosts if h.leaf == 0}, failed
    assert all(v.startswith("FAIL uplink: leaf0: ") and ";" not in v for v in failed.values()), failed


# A host that stops or dies midway, 16 ranks: the watchdog relayed per host names it within --timeout
# (a stopped host's leader forwards nobody's beats) and the flows measured so far judge the others.
@pytest.mark.cluster
@pytest.mark.mpi
@pytest.mark.parametrize("fault", ["stop", "kill"])
def test_a_host_that_stops_or_dies_midway_reads_fail_lost(fault, rails_cluster, workdir):
    c = rails_cluster
    c.reset()
    out = os.path.join(workdir, f"{fault}.json")
    timeout = 10
    # Rank 0's address for the watchdogs' side channel: the namespaces' host names do not resolve.
    p = c.popen([*c.mpirun_prefix(2, export={"COMMBENCH_MASTER_ADDR": c.hosts[0].addr, **FLOW_WAITS}), COMMBENCH, *RAILS,
                 "--timeout", str(timeout), "-o", out], cwd=workdir)
    wait_for_rows(out, p, 120)
    victims = [pid for rank, pid in rank_pids(out).items() if rank in (10, 11)]  # host 5's
    if fault == "kill":
        victims = victims[1:]  # rank 11 alone: its leader, rank 10, tells rank 0
    start = time.monotonic()
    for pid in victims:
        os.kill(pid, signal.SIGSTOP if fault == "stop" else signal.SIGKILL)
    said, err = p.communicate(timeout=timeout + 60)
    elapsed = time.monotonic() - start
    for pid in victims:
        if fault == "stop":
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    assert p.returncode != 0 and elapsed < timeout + 10, (elapsed, err[-2000:])
    doc = results.load_document(out)
    lost = c.hosts[5].name
    # mpirun may end rank 0 once a rank's process ended, before it could close the file or judge
    # (status still running, as tests/test_faults.py allows): the rows stay.
    if fault == "kill" and "links" not in doc:
        assert doc["results"] and doc["status"] in ("running", "interrupted", "peer-lost"), doc["status"]
        return
    assert doc["results"] and doc["status"] in ("timeout", "peer-lost", "interrupted"), doc["status"]
    verdicts = doc["links"]["verdicts"]
    named = {h for h, v in verdicts.items() if v.startswith("FAIL lost: rank")}
    assert lost in named, verdicts
    # A run that mpirun's SIGTERM ended (after a killed rank) says it was interrupted, naming no host.
    assert re.search(rf"\(hosts? [^)]*{lost}", doc["error"]) or fault == "kill", doc["error"]
    # A stopped host alone is lost. Ranks that a killed rank's process talked with may be ended by Open
    # MPI itself (a TCP connection closed: MPI_ERRORS_ARE_FATAL, no communicator to ask) before rank 0
    # reports, and read lost too: how many depends on the load (up to 3 hosts seen beside the tests).
    if fault == "stop":
        assert named == {lost}, verdicts
    # A user's mpirun that saw a rank's process end may stop relaying rank 0's output before its
    # verdicts (docs/launching.md): the file has them (above) either way.
    assert f"{lost} | FAIL lost: " in said or (fault == "kill" and "| FAIL" not in said), said[-2000:]


# On emulated GPUs (the gpu pass of `make test`): NCCL send/recv on the world communicator at host
# level across namespace hosts. The emulated NCCL moves data through shared memory, not the veths:
# a functional run (rounds, rows, the exact check, a verdict per host), its figures not judged, but for
# the cap the emulated NCCL puts on a flow between hosts (COMMBENCH_EMU_NCCL_CHANNEL_GBPS: its
# channels per peer times that rate). Over 3 hosts NCCL would give each peer 2 of its 8 channels; links
# gives a flow the channels it would have alone (NCCL_NCHANNELS_PER_NET_PEER), unless the user set
# them: that flow then runs at its one channel's rate, the INIT line says so, and so does the file; and
# against a NIC of its 8 channels' rate (--nic-rate: the namespaces' veths are virtual, their snapshot
# knows no rate) the output warns that a NIC at half its rate could not be seen.
@pytest.mark.gpu
@pytest.mark.cluster
@pytest.mark.mpi
def test_host_level_over_nccl_on_emulated_gpus_is_a_functional_run(make_cluster, workdir):
    from commbench.node.gpu import EMULATION
    if not os.environ.get(EMULATION):
        pytest.skip(f"needs the emulated GPUs ({EMULATION}, as make test's gpu pass sets)")
    c = make_cluster(3)
    rate = 0.02  # GB/s a channel
    export = {"COMMBENCH_MASTER_ADDR": c.hosts[0].addr, EMULATION: os.environ[EMULATION],
              "PYTHONPATH": os.environ.get("PYTHONPATH", ""), "COMMBENCH_EMU_NCCL_CHANNEL_GBPS": str(rate)}
    inter = {}
    for case, more in (("alone", {}), ("user's", {"NCCL_NCHANNELS_PER_NET_PEER": "1"})):
        out = os.path.join(workdir, f"nccl-{len(inter)}.json")
        r = c.mpirun([COMMBENCH, *CLUSTER, "--impl", "nccl", "--nic-rate", str(8 * rate), "-o", out],
                     ranks_per_host=2, timeout=240, cwd=workdir, export={**export, **more})
        assert r.returncode in (0, 1), r.stdout[-3000:] + r.stderr[-3000:]
        doc = results.load_document(out)
        assert doc["status"] == "complete" and doc["links"]["impl"] == "nccl"
        assert {x["impl"] for x in doc["results"]} == {"nccl"} and all(x["wrong"] == 0 for x in doc["results"])
        stages = {x["schedule"] for x in doc["results"]}
        assert {"intra", "inter"} <= stages
        assert [VERDICT.match(line).group(1) for line in r.stdout.splitlines() if VERDICT.match(line)] == \
            [h.name for h in c.hosts]
        per_peer = 8 if case == "alone" else 1
        assert doc["nccl_channels"] == {"coll": 8, "collnet": 8, "nvls": 0, "p2p": 8, "p2p_per_peer": per_peer}
        assert doc["links"]["nccl_channels"] == doc["nccl_channels"]
        assert doc["links"]["nccl_channels_per_net_peer"] == ("8" if case == "alone" else "1")
        assert f"# NCCL's channels: 8 for collectives, 8 for point-to-point, {per_peer} to each peer" in r.stdout
        # Each rank's NIC as its NCCL log names it; every rank of a namespace host has eth0 alone, which
        # names no rail.
        assert doc["nccl_nics"] == ["eth0"] * 6 and doc["links"]["nics"] is None
        inter[case] = doc["links"]["typical"]["bandwidth_gbps"]["inter"]
        # A flow holds to its channels: at most their rate (2 MiB of a window, timed with its ack).
        assert inter[case] <= per_peer * rate * 1.05, (case, inter)
        warned = "# warning: the typical flow between hosts, " in r.stdout
        assert doc["links"]["nic_gbps"] == 8 * rate and doc["links"]["below_nic"] == warned == (case == "user's"), \
            (case, inter, r.stdout[-2000:])
    assert inter["alone"] > 4 * inter["user's"], inter
