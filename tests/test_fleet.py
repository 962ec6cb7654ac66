"""`commbench fleet`: the node that stands apart from the nodes of its SKU, among a thousand
synthesized node results, and on the test cluster with one host's link shaped slower."""

import copy
import json
import os
import time

import numpy as np
import pytest
from cluster import measured_until
from conftest import COMMBENCH, commbench

from commbench.analysis import fleet as fleet_analysis
from commbench.analysis import sku
from docs import PLANTED, node_doc, write_fleet


def test_three_planted_outliers_among_a_thousand_nodes_are_exactly_the_ones_named(tmp_path):
    folder = tmp_path / "fleet"
    write_fleet(str(folder), 1000)
    # A file that is no result among them is passed over with a warning.
    (folder / "notes.json").write_text("[1, 2]")
    start = time.perf_counter()
    r = commbench(["fleet", str(folder), "--json"], cwd=str(tmp_path))
    elapsed = time.perf_counter() - start
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("warning: skipped 1 file(s) that are not result files, e.g. ") and "notes.json" in r.stderr
    found = json.loads(r.stdout)
    assert len(found["nodes"]) == 1000 and list(found["skus"]) == ["no GPU; AMD EPYC 9654, 96 cores"]
    assert {(o["node"], o["metric"]) for o in found["outliers"]} == \
        {(f"node{i:04d}", metric) for i, (_, metric) in PLANTED.items()}
    assert all(o["worse"] and abs(o["z"]) > 3.5 for o in found["outliers"])
    print(f"fleet of 1000 node files: {elapsed:.1f} s")  # benchmarks/fleet.py times it against its target


def test_the_table_ranks_outliers_and_says_how_they_were_found(tmp_path):
    rng = np.random.default_rng(3)
    docs = [(f"n{i}.json", node_doc(f"n{i}", rng, busbw=0.5 if i == 2 else 1.0)) for i in range(8)]
    # Another SKU of 2 nodes: too few to say which stands apart, whatever their figures.
    docs += [(f"g{i}.json", node_doc(f"g{i}", rng, busbw=0.2 * (i + 1), cpu="Grace")) for i in range(2)]
    found = fleet_analysis.analyse(docs)
    assert [(o["node"], o["metric"]) for o in found["outliers"]] == [("n2", "allreduce ring@mpi (2 ranks) busbw@4M (GB/s)")]
    text = "\n".join(fleet_analysis.lines(found))
    assert "# fleet: 10 node(s) from 10 result file(s), 2 SKU(s)" in text
    assert "> 3.5 among the nodes of its SKU (MAD at least 1 % of the median; 3 nodes or more)" in text
    assert "# SKU no GPU; Grace, 96 cores: 2 node(s)" in text
    last = text.splitlines()[-1].split()
    assert last[:2] == ["1", "n2"] and text.endswith("worse than its fleet")
    png = tmp_path / "fleet.png"
    fleet_analysis.plot(found, str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args,needle", [
    (["fleet", "nowhere"], "nowhere: no such file or folder"),
    (["fleet", "empty"], "no result files among empty"),
])
def test_bad_input_is_one_line(args, needle, tmp_path):
    (tmp_path / "empty").mkdir()
    r = commbench(args, cwd=str(tmp_path))
    assert r.returncode == 2 and r.stderr == f"commbench: error: {needle}\n" and r.stdout == ""


@pytest.mark.cluster
@pytest.mark.mpi
def test_the_host_shaped_slower_stands_apart_on_the_cluster(make_cluster, workdir):
    """links over the 4 hosts of the test cluster, one host's link shaped to a third: fleet, over the
    run's file, names that host by its inter-host bandwidth and no other host by bandwidth."""
    c = make_cluster(4, rates=[300, 300, 300, 100])

    def measure(attempt):
        out = os.path.join(workdir, f"links{attempt}.json")
        r = c.mpirun([COMMBENCH, "links", "--judge", "bandwidth", "--bandwidth-size", "1M", "--window", "2",
                      "--budget-ms", "50", "--min-iters", "3", "--warmup", "1", "-o", out], timeout=180, cwd=workdir)
        assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
        return commbench(["fleet", out, "--json"], cwd=workdir)

    # Once in the first pass beside the other workers' tests, the fast pairs spread so far that the host
    # at a third stood within the fleet's spread (fleet exit 0): measured again then, as the ground truths.
    r = measured_until(measure, lambda r: r.returncode == 1)
    assert r.returncode == 1, r.stdout + r.stderr
    found = json.loads(r.stdout)
    assert set(found["nodes"]) == {h.name for h in c.hosts}
    by_bandwidth = {o["node"] for o in found["outliers"] if "bandwidth" in o["metric"]}
    assert by_bandwidth == {c.hosts[3].name}


def test_a_degraded_node_is_of_its_healthy_siblings_sku():
    """The SKU is the node's kind: a NVLink down or an InfiniBand port down (the degraded fixture)
    is its health, to be judged against its kind's baseline, not a kind of its own."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "topo")
    skus = set()
    for name in ("hgx_h100_healthy", "hgx_h100_degraded"):
        with open(os.path.join(here, f"{name}.json")) as f:
            skus.add(sku.sku_of({"topology": json.load(f)}))
    assert skus == {"8x NVIDIA H100 80GB HBM3; NVLink 4; NVSwitch gen 3; 8 IB port(s) up to 400 Gb/s; "
                    "Intel(R) Xeon(R) Platinum 8480+, 112 cores"}


def test_the_sku_names_switches_and_network_models():
    """A baseboard's NVSwitches on PCI, the HCAs' and NICs' models: part of the kind. A NIC that is a
    veth, an SR-IOV function or the management controller's USB link is none; the fingerprint, the
    versions and an NVSwitch missing from PCI (health) stay out. A snapshot of an older commbench,
    without those parts, is of the same kind as a new one of the node."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "topo")
    with open(os.path.join(here, "hgx_h100_healthy.json")) as f:
        old = json.load(f)
    snap = copy.deepcopy(old)
    host = snap["host"]
    host["nvswitches"] = [{"bus_id": f"0000:0{i}:00.0", "model": "10de:22a3"} for i in range(4)]
    for port in host["infiniband"]:
        port["model"] = "15b3:1021"
    for nic in host["nics"]:
        nic.update(model="14e4:16d7" if nic["type"] == "ethernet" else None, bus="pci" if not nic["virtual"] else None,
                   sriov_vf=False)
    host["nics"] += [{"name": "veth0", "type": "ethernet", "state": "up", "mtu": 1500, "virtual": True, "bus": None},
                     {"name": "ens1f0v0", "type": "ethernet", "state": "up", "mtu": 1500, "virtual": False, "bus": "pci",
                      "sriov_vf": True, "model": "15b3:101e"},
                     {"name": "usb0", "type": "ethernet", "state": "up", "mtu": 1500, "virtual": False, "bus": "usb",
                      "model": "0b1f:03ee"}]
    snap["fingerprint"] = "another"
    new = {"topology": snap}
    assert sku.sku_of(new) == (
        "8x NVIDIA H100 80GB HBM3; NVLink 4; NVSwitch gen 3 (10de:22a3); 8 IB port(s) 15b3:1021 up to 400 Gb/s; "
        "2x ethernet NIC 14e4:16d7; Intel(R) Xeon(R) Platinum 8480+, 112 cores")
    assert sku.same_kind(new, {"topology": old}) and sku.differences(new, {"topology": old}) == []
    fewer = copy.deepcopy(snap)
    fewer["host"]["nvswitches"] = fewer["host"]["nvswitches"][:3]  # one switch fell off the bus: health
    assert sku.sku_of({"topology": fewer}) == sku.sku_of(new)
    other = copy.deepcopy(snap)
    for port in other["host"]["infiniband"]:
        port["model"] = "15b3:1017"
    assert not sku.same_kind(new, {"topology": other})
    assert sku.differences(new, {"topology": other}) == ["ib_model: 15b3:1021 against 15b3:1017"]
    for d in snap["gpus"]["devices"]:  # a PCIe node: no link, no switch
        d["nvlink_links"], d["nvlink"] = [], {"links_up": 0, "links_total": 0, "version": None}
    host["nvswitches"] = []
    assert sku.sku_of(new).startswith("8x NVIDIA H100 80GB HBM3; 8 IB port(s)")


def test_a_metric_sets_apart_what_changes_its_figure():
    """The plain all-reduce, one captured in a CUDA graph, one with a rank held back, one on more ranks
    and one in another data type are five metrics, never one (a plan runs them all on a node)."""
    rng = np.random.default_rng(5)
    names = set()
    for change in ({}, {"graph": True}, {"delay": {"rank": 1, "us": 2000.0}}, {"ranks": 4}, {"dtype": "bfloat16"}):
        doc = node_doc("n1", rng)
        doc["results"] = [r for r in doc["results"] if r["op"] == "allreduce"]
        for r in doc["results"]:
            r["ranks"] = change.get("ranks", 2)
            r["dtype"] = change.get("dtype", "float32")
        doc["config"].update({k: v for k, v in change.items() if k in ("graph", "delay")})
        [figures] = fleet_analysis.node_figures(doc).values()
        names.add(next(m for m in figures if "busbw" in m))
    assert names == {"allreduce ring@mpi (2 ranks) busbw@4M (GB/s)", "allreduce ring@mpi (2 ranks) graph busbw@4M (GB/s)",
                     "allreduce ring@mpi (2 ranks) delay 1:2000 busbw@4M (GB/s)",
                     "allreduce ring@mpi (4 ranks) busbw@4M (GB/s)", "allreduce ring@mpi (2 ranks) bfloat16 busbw@4M (GB/s)"}


def test_the_command_draws_its_heat_map(tmp_path):
    write_fleet(str(tmp_path / "runs"), 20)
    r = commbench(["fleet", str(tmp_path / "runs"), "--plot", str(tmp_path / "fleet.png")], cwd=str(tmp_path))
    assert r.returncode == 1 and "node0017" in r.stdout.splitlines()[-2], r.stdout + r.stderr
    assert r.stdout.splitlines()[-1] == f"# plot: {tmp_path / 'fleet.png'}"
    assert (tmp_path / "fleet.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = commbench(["fleet", str(tmp_path / "runs"), "--plot", str(tmp_path / "fleet.png")], cwd=str(tmp_path))
    assert r.returncode == 2 and r.stderr.startswith("commbench: error: ") and r.stderr.count("\n") == 1, r.stderr
