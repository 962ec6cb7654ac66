"""topo and doctor: NVML through a fake pynvml that follows NVML's conventions, recorded snapshots of
four kinds of node as fixtures, and the real commands on this host."""

import copy
import json
import os
import sys

import fake_pynvml
import pytest
from conftest import commbench

from commbench.node import doctor, topo

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "topo")
EXPECT_HGX = {"gpus": 8, "gpu_name": "H100", "nvlinks_per_gpu": 18, "pcie_gen": 5, "pcie_width": 16,
              "ib_ports": 8, "ib_rate_gbps": 400}


def fixture(name):
    with open(os.path.join(FIXTURES, f"{name}.json")) as f:
        return json.load(f)


def verdicts(snap, expect=None):
    return [(c.name, c.status, c.evidence) for c in doctor.run_checks(snap, expect)]


def failing(snap, expect=None):
    return sorted((n, e.split(":")[0]) for n, s, e in verdicts(snap, expect) if s == doctor.FAIL)


# ---- the NVML layer -------------------------------------------------------------------------------

def _gpu(i, bus, links, level, **kw):
    d = dict(name="NVIDIA A100-SXM4-80GB", bus=bus, pcie=(4, 4, 16, 16), links=links, nvlink_version=4,
             cpus=set(range(0, 32)), reasons=0x1 | 0x4, temp=40, power_mw=90500, limit_mw=400000, ecc=0,
             remap=(0, 0, 0, 0), procs=[(999, 2 << 30)], p2p={}, level=level)
    d.update(kw)
    return d


def test_nvml_snapshot_follows_nvml_conventions(monkeypatch):
    # Two GPUs joined by 12 direct NVLinks, a third only on PCIe under the same switch as GPU 0.
    a, b, c = "07:00.0", "0f:00.0", "47:00.0"
    gpus = [_gpu(0, a, [(True, b)] * 12, {0: 0, 1: 20, 2: 10}),
            _gpu(1, b, [(True, a)] * 11 + [(False, a)], {0: 20, 1: 0, 2: 50}),
            _gpu(2, c, [], {0: 10, 1: 50, 2: 0}, p2p={1: 5}, ecc=None, remap=None, compute_mode=3, mig=(1, 1))]
    fake = fake_pynvml.make(gpus)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    section, p2p, matrix = topo.gpu_part(sys_root="/nonexistent")
    assert fake.state["init"] == 0  # nvmlShutdown after nvmlInit
    assert section["available"] and section["driver"] == "550.54.15" and section["cuda_driver"] == "12.4"
    d0, d1, d2 = section["devices"]
    assert d0["pci_bus_id"] == "0000:07:00.0" and d0["name"] == "NVIDIA A100-SXM4-80GB"
    assert d0["pcie"] == {"gen_current": 4, "gen_max": 4, "width_current": 16, "width_max": 16}
    assert d0["nvlink"] == {"links_up": 12, "links_total": 12, "version": 3}
    assert d1["nvlink"]["links_up"] == 11 and d2["nvlink"] == {"links_up": 0, "links_total": 0, "version": None}
    assert d0["clock_event_reasons"] == ["gpu_idle", "sw_power_cap"]
    assert d0["cpu_affinity"] == "0-31" and d0["power_w"] == 90.5 and d0["power_limit_w"] == 400.0
    assert d0["processes"] == [{"pid": 999, "used_memory_bytes": 2 << 30}]
    assert d2["ecc"]["volatile_uncorrected"] is None and d2["remapped_rows"] is None  # not supported
    assert (d0["compute_mode"], d0["mig"]) == ("default", None) and (d2["compute_mode"], d2["mig"]) == ("exclusive_process", True)
    assert matrix == [["X", "NV12", "PIX"], ["NV11", "X", "SYS"], ["PIX", "SYS", "X"]]
    assert p2p[2][1] == {"read": "status 5", "write": "status 5", "nvlink": "status 5"} and p2p[0][0] is None


def test_nvswitch_links_count_as_nvlink_between_every_pair():
    snap = fixture("hgx_h100_healthy")
    assert all(snap["topology"][i][j] == ("X" if i == j else "NV18") for i in range(8) for j in range(8))


def test_no_nvml_library_is_explained(monkeypatch):
    def broken():
        raise RuntimeError("NVML Shared Library Not Found")
    section, p2p, matrix = topo.gpu_part(broken)
    assert section == {"available": False, "reason": "NVML unavailable: NVML Shared Library Not Found", "devices": []}
    assert p2p == [] and matrix == []


def test_host_part_reads_sysfs(tmp_path):
    def put(path, text):
        p = tmp_path / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    put("proc/cpuinfo", "processor : 0\nphysical id : 0\nprocessor : 1\nphysical id : 1\n")
    put("sys/devices/system/node/node0/cpulist", "0-3\n")
    put("sys/devices/system/node/node0/meminfo", "Node 0 MemTotal:       1048576 kB\n")
    put("sys/devices/system/node/node1/cpulist", "4-7\n")
    put("sys/devices/system/node/node1/meminfo", "Node 1 MemTotal:       2097152 kB\n")
    for name, kind, mtu, speed in (("ib0", 32, 4092, 200000), ("eth0", 1, 9000, 100000), ("lo", 772, 65536, None)):
        put(f"sys/class/net/{name}/type", f"{kind}\n")
        put(f"sys/class/net/{name}/mtu", f"{mtu}\n")
        put(f"sys/class/net/{name}/operstate", "up\n")
        if speed:
            put(f"sys/class/net/{name}/speed", f"{speed}\n")
            put(f"sys/class/net/{name}/device/vendor", "0x15b3\n")
            put(f"sys/class/net/{name}/device/device", "0x101B\n")
    put("sys/class/infiniband/mlx5_0/device/vendor", "0x15b3\n")
    put("sys/class/infiniband/mlx5_0/device/device", "0x101b\n")
    (tmp_path / "sys/bus/pci/drivers/mlx5_core").mkdir(parents=True)
    os.symlink(tmp_path / "sys/bus/pci/drivers/mlx5_core", tmp_path / "sys/class/net/eth0/device/driver")
    # Two NVSwitches of a baseboard, beside a GPU and another maker's bridge.
    for bus, vendor, cls, dev in (("0000:05:00.0", "0x10de", "0x068000", "0x22a3"), ("0000:06:00.0", "0x10de", "0x068000", "0x22a3"),
                                  ("0000:18:00.0", "0x10de", "0x030200", "0x2330"), ("0000:00:01.0", "0x8086", "0x068000", "0x09ab")):
        put(f"sys/bus/pci/devices/{bus}/vendor", f"{vendor}\n")
        put(f"sys/bus/pci/devices/{bus}/class", f"{cls}\n")
        put(f"sys/bus/pci/devices/{bus}/device", f"{dev}\n")
    put("sys/class/infiniband/mlx5_0/ports/1/rate", "200 Gb/sec (4X HDR)\n")
    put("sys/class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n")
    put("sys/class/infiniband/mlx5_0/ports/1/phys_state", "5: LinkUp\n")
    put("sys/class/infiniband/mlx5_0/ports/1/link_layer", "InfiniBand\n")
    h = topo.host_part(str(tmp_path))
    assert h["sockets"] == 2
    assert h["numa_nodes"] == [{"node": 0, "cpus": "0-3", "memory_bytes": 1 << 30},
                               {"node": 1, "cpus": "4-7", "memory_bytes": 2 << 30}]
    nics = {n["name"]: n for n in h["nics"]}
    assert nics["ib0"]["type"] == "infiniband" and nics["ib0"]["speed_mbps"] == 200000 and not nics["ib0"]["virtual"]
    assert nics["lo"]["type"] == "loopback" and nics["lo"]["virtual"]
    assert (nics["eth0"]["model"], nics["eth0"]["driver"], nics["lo"]["model"]) == ("15b3:101b", "mlx5_core", None)
    assert h["infiniband"] == [{"hca": "mlx5_0", "port": 1, "model": "15b3:101b", "rate_gbps": 200.0, "state": "ACTIVE",
                                "phys_state": "LinkUp", "link_layer": "InfiniBand"}]
    assert h["nvswitches"] == [{"bus_id": "0000:05:00.0", "model": "10de:22a3"}, {"bus_id": "0000:06:00.0", "model": "10de:22a3"}]


@pytest.mark.parametrize("text,cpus", [("0-3,8,10-11", {0, 1, 2, 3, 8, 10, 11}), ("", set()), ("5", {5})])
def test_cpulists(text, cpus):
    assert topo.cpulist_to_set(text) == cpus
    assert topo.set_to_cpulist(cpus) == text


# ---- doctor on recorded snapshots ------------------------------------------------------------------

def test_healthy_hgx_passes_including_its_node_class():
    snap = fixture("hgx_h100_healthy")
    assert [v for v in verdicts(snap, EXPECT_HGX) if v[1] != doctor.PASS] == []
    assert doctor.exit_status(doctor.run_checks(snap)) == 0


@pytest.mark.parametrize("driver,torch_cuda,status", [("12.4", "12.4", doctor.PASS), ("13.0", "12.8", doctor.PASS),
                                                      ("12.8", "13.0", doctor.FAIL), ("12.10", "12.9", doctor.PASS)])
def test_a_driver_older_than_torchs_cuda_fails_with_the_remedy(driver, torch_cuda, status):
    """Defect 4: a node whose driver is older than the CUDA torch is built for fails every CUDA call."""
    snap = fixture("hgx_h100_healthy")
    snap["gpus"]["cuda_driver"], snap["libraries"]["torch_cuda"] = driver, torch_cuda
    [check] = [c for c in doctor.run_checks(snap) if c.name == "cuda_driver"]
    assert check.status == status
    assert status == doctor.PASS or check.remedy.startswith(f"make install TORCH_CUDA=cu{driver.replace('.', '')}")


def test_degraded_hgx_fails_exactly_where_it_is_degraded():
    snap = fixture("hgx_h100_degraded")
    assert failing(snap) == [("nvlink", "GPU 6 (0000"), ("pcie_width", "GPU 2 (0000"),
                             ("peer_access", "GPU 4 <-> GPU 5 (NV18)"), ("throttle", "GPU 3 (0000")]
    # A port DOWN with no physical state recorded may simply be uncabled: a warning on its own,
    # a failure against a node class that counts its ports (below).
    warns = [(n, e) for n, s, e in verdicts(snap) if s == doctor.WARN]
    assert warns == [("infiniband", "mlx5_5 port 1: state DOWN: unused or down"),
                     ("mtu", "ethernet interfaces differ in MTU: eno1 1500, eno2 9000")]
    assert doctor.exit_status(doctor.run_checks(snap)) == 1
    expect_fails = {e for n, e in failing(snap, EXPECT_HGX) if n.startswith("expect_")}
    assert expect_fails == {"GPU 6", "GPU 2", "7 active InfiniBand port(s), expected 8", "mlx5_5 port 1"}


def test_workstation_without_p2p_across_host_bridge_passes():
    snap = fixture("pcie_workstation_2gpu")
    v = verdicts(snap)
    assert ("peer_access", "PASS", "GPU 0 <-> GPU 1 (PHB): no P2P, as expected across PHB") in v
    assert doctor.exit_status(doctor.run_checks(snap)) == 0
    assert failing(snap, {"gpus": 8}) == [("expect_gpus", "2 GPU(s), expected 8")]


def test_cpu_only_host_passes_and_says_why():
    snap = fixture("cpu_only")
    assert verdicts(snap) == [("gpus", "PASS", "no GPU checks: NVML unavailable: NVML Shared Library Not Found")]


def _healthy_with(mutate):
    snap = copy.deepcopy(fixture("hgx_h100_healthy"))
    mutate(snap)
    return snap


@pytest.mark.parametrize("mutate,name,status", [
    (lambda s: s["gpus"]["devices"][1]["processes"].append({"pid": 77, "used_memory_bytes": 3 << 30}),
     "foreign_processes", "WARN"),
    (lambda s: s["gpus"]["devices"][1]["ecc"].update(volatile_uncorrected=2), "memory_errors", "FAIL"),
    (lambda s: s["gpus"]["devices"][1]["remapped_rows"].update(pending=True), "memory_errors", "FAIL"),
    (lambda s: s["gpus"]["devices"][1]["clock_event_reasons"].append("sw_power_cap"), "throttle", "WARN"),
    (lambda s: s["gpus"]["devices"][1]["pcie"].update(gen_current=1) or
     s["gpus"]["devices"][1]["clock_event_reasons"].remove("gpu_idle"), "pcie_gen", "WARN"),
    (lambda s: s["process"].update(cpu_affinity="0-7", pid=1) or None, "cpu_affinity", "WARN"),
    (lambda s: s["process"].update(cuda_visible_devices="0,1,1"), "gpu_mapping", "FAIL"),
    (lambda s: s["process"].update(local_rank="8"), "gpu_mapping", "FAIL"),
    (lambda s: s["gpus"]["devices"][1].update(compute_mode="exclusive_process"), "compute_mode", "WARN"),
    (lambda s: s["gpus"]["devices"][1].update(compute_mode="prohibited"), "compute_mode", "FAIL"),
    (lambda s: s["gpus"]["devices"][1].update(mig=True), "mig", "WARN"),
])
def test_each_field_gets_its_verdict(mutate, name, status):
    snap = _healthy_with(mutate)
    hits = [(n, s) for n, s, _ in verdicts(snap) if n == name and s != "PASS"]
    assert hits and all(s == status for _, s in hits)
    others = [(n, s) for n, s, _ in verdicts(snap) if s != "PASS" and n != name]
    assert others == []


@pytest.mark.parametrize("ecc,status,evidence", [
    ({"volatile_uncorrected": 2, "aggregate_uncorrected": 2}, "FAIL", "2 uncorrected ECC error(s) since boot"),
    ({"volatile_uncorrected": 0, "aggregate_uncorrected": 3}, "WARN",
     "3 uncorrected ECC error(s) in the GPU's lifetime, none since boot"),
    ({"volatile_uncorrected": None, "aggregate_uncorrected": 3}, "WARN",
     "3 uncorrected ECC error(s) in the GPU's lifetime"),
    ({"volatile_corrected": 40, "aggregate_corrected": 900}, None, None),  # corrected errors did no harm
])
def test_ecc_errors_fail_only_when_they_happened_since_boot(ecc, status, evidence):
    snap = _healthy_with(lambda s: s["gpus"]["devices"][1]["ecc"].update(ecc))
    found = [(s, e) for n, s, e in verdicts(snap) if n == "memory_errors"]
    assert found == ([] if status is None else [(status, f"GPU 1 (0000:2a:00.0): {evidence}")])


def _ib_port(state, rate=400.0, phys=None, layer="InfiniBand"):
    port = {"hca": "mlx5_8", "port": 1, "rate_gbps": rate, "state": state, "link_layer": layer}
    return port if phys is None else {**port, "phys_state": phys}


@pytest.mark.parametrize("port,status,evidence", [
    (_ib_port("DOWN", None, "Polling"), "WARN", "state DOWN, physical state Polling: unused or down"),
    (_ib_port("DOWN", None, "Disabled"), "WARN", "state DOWN, physical state Disabled: unused or down"),
    (_ib_port("DOWN", None, layer="Ethernet"), "WARN", "state DOWN: unused or down"),
    (_ib_port("INIT", 400.0, "LinkUp"), "FAIL",
     "state INIT, physical state LinkUp: the link is up but not in service"),
    (_ib_port("ARMED"), "FAIL", "state ARMED: the link is up but not in service"),
    (_ib_port("DOWN", None, "LinkErrorRecovery"), "FAIL",
     "state DOWN, physical state LinkErrorRecovery: the link is up but not in service"),
    (_ib_port("ACTIVE", 200.0, "LinkUp"), "FAIL",
     "ACTIVE at 200.0 Gb/s, below the 400.0 Gb/s of the other InfiniBand ports"),
    (_ib_port("ACTIVE", 100.0, "LinkUp", "Ethernet"), "PASS", "ACTIVE at 100.0 Gb/s (Ethernet)"),
])
def test_infiniband_ports_fail_only_on_a_broken_link(port, status, evidence):
    snap = _healthy_with(lambda s: s["host"]["infiniband"].append(port))
    assert [(s, e) for n, s, e in verdicts(snap) if e.startswith("mlx5_8")] == [(status, f"mlx5_8 port 1: {evidence}")]
    assert [s for n, s, e in verdicts(snap) if n == "infiniband" and not e.startswith("mlx5_8")] == ["PASS"] * 8


def _one_gpu_of(snap, links_up):
    """The snapshot as a one-GPU slice of the node shows it: GPU 0 alone, `links_up` of its links up."""
    gpu = snap["gpus"]["devices"][0]
    for i, link in enumerate(gpu["nvlink_links"]):
        link["up"] = i < links_up
    gpu["nvlink"]["links_up"] = links_up
    snap["gpus"]["devices"] = [gpu]
    snap["p2p"], snap["topology"] = [[None]], [["X"]]


def test_nvlink_inactive_passes_on_a_lone_gpu_and_fails_beside_peers():
    lone = _healthy_with(lambda s: _one_gpu_of(s, 0))
    assert [(s, e) for n, s, e in verdicts(lone) if n == "nvlink"] == [
        ("PASS", "GPU 0 (0000:18:00.0): NVLink inactive: no peer GPU visible")]
    assert doctor.exit_status(doctor.run_checks(lone)) == 0
    assert failing(lone, {"nvlinks_per_gpu": 18}) == [("expect_nvlink", "GPU 0")]
    partly = _healthy_with(lambda s: _one_gpu_of(s, 12))
    assert failing(partly) == [("nvlink", "GPU 0 (0000")]
    beside_peers = _healthy_with(lambda s: s["gpus"]["devices"][3]["nvlink"].update(links_up=0))
    assert failing(beside_peers) == [("nvlink", "GPU 3 (0000")]


def test_idle_gpu_at_a_lower_pcie_generation_is_fine():
    snap = _healthy_with(lambda s: s["gpus"]["devices"][0]["pcie"].update(gen_current=1))
    assert ("pcie_gen", "PASS") in [(n, s) for n, s, _ in verdicts(snap)]


# ---- the commands ----------------------------------------------------------------------------------

def test_topo_json_on_this_host(workdir):
    r = commbench(["topo", "--json"], cwd=workdir)
    assert r.returncode == 0, r.stderr
    snap = json.loads(r.stdout)
    assert snap["schema"] == "commbench-topo-1" and snap["host"]["cores"] == os.cpu_count()
    assert snap["host"]["numa_nodes"] and snap["libraries"]["torch"]
    if not snap["gpus"]["available"]:
        assert snap["gpus"]["reason"]
    for d in snap["gpus"]["devices"]:
        assert set(d["pcie"]) == {"gen_current", "gen_max", "width_current", "width_max"}
        assert {"links_up", "links_total"} <= set(d["nvlink"])
    assert len(snap["fingerprint"]) == 16
    human = commbench(["topo"], cwd=workdir)
    assert human.returncode == 0 and "fingerprint:" in human.stdout and "host " in human.stdout


def test_doctor_on_this_host_and_from_snapshots(workdir):
    r = commbench(["doctor", "--json"], cwd=workdir)
    out = json.loads(r.stdout)
    assert r.returncode == (1 if out["status"] == "FAIL" else 0)
    assert commbench(["doctor", "--from", os.path.join(FIXTURES, "hgx_h100_healthy.json")], cwd=workdir).returncode == 0
    bad = commbench(["doctor", "--from", os.path.join(FIXTURES, "hgx_h100_degraded.json")], cwd=workdir)
    assert bad.returncode == 1 and "FAIL  nvlink" in bad.stdout and "remedy:" in bad.stdout
    expect = os.path.join(workdir, "hgx.json")
    with open(expect, "w") as f:
        json.dump(EXPECT_HGX, f)
    assert commbench(["doctor", "--from", os.path.join(FIXTURES, "hgx_h100_healthy.json"), "--expect", expect],
                     cwd=workdir).returncode == 0


@pytest.mark.parametrize("args,needle", [
    (["doctor", "--from", "/nonexistent.json"], "No such file"),
    (["doctor", "--from", os.path.join(FIXTURES, "..", "..", "conftest.py")], "is not JSON"),
])
def test_doctor_bad_input(args, needle, workdir):
    r = commbench(args, cwd=workdir)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("expect,needle", [({"gpus": 8, "gpu_count": 8}, "unknown key 'gpu_count'"),
                                           ({"nvlinks_per_gpu": "18"}, "invalid field 'nvlinks_per_gpu': '18' is not of type"),
                                           ([8], "[8] is not of type 'object'"), ([], "[] is not of type 'object'"),
                                           ({}, "{} should be non-empty"),
                                           ({"gpus": -1}, "invalid field 'gpus': -1 is less than the minimum of 0"),
                                           ({"pcie_width": 12}, "invalid field 'pcie_width': 12 is not one of"),
                                           ({"gpus": True}, "invalid field 'gpus': True is not of type 'integer'")])
def test_doctor_rejects_bad_expectations(expect, needle, workdir):
    path = os.path.join(workdir, "x.json")
    with open(path, "w") as f:
        json.dump(expect, f)
    r = commbench(["doctor", "--from", os.path.join(FIXTURES, "cpu_only.json"), "--expect", path], cwd=workdir)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr


def _snapshot_with(change):
    with open(os.path.join(FIXTURES, "hgx_h100_healthy.json")) as f:
        snap = json.load(f)
    change(snap)
    return snap


@pytest.mark.parametrize("change,needle", [
    (lambda s: s["gpus"].update(devices=None), "invalid field 'gpus/devices': None is not of type 'array'"),
    (lambda s: s["host"].update(cores="112"), "invalid field 'host/cores': '112' is not of type 'integer'"),
    (lambda s: s["gpus"]["devices"][3]["nvlink"].pop("links_up"),
     "invalid field 'gpus/devices/3/nvlink': 'links_up' is a required property"),
    (lambda s: s["host"]["infiniband"][0].update(rate_gbps=-5), "invalid field 'host/infiniband/0/rate_gbps': -5 is less than"),
    (lambda s: s.update(schema="other-1"), "invalid field 'schema': 'commbench-topo-1' was expected"),
    (lambda s: s.pop("host"), "'host' is a required property"),
])
def test_doctor_refuses_a_snapshot_it_cannot_judge_in_one_line(change, needle, workdir):
    """A hand-edited or truncated snapshot is bad input (exit 2), never a traceback nor a node that fails."""
    path = os.path.join(workdir, "snap.json")
    with open(path, "w") as f:
        json.dump(_snapshot_with(change), f)
    r = commbench(["doctor", "--from", path], cwd=workdir)
    assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"commbench: error: --from {path}: not a usable snapshot") and needle in r.stderr, r.stderr


@pytest.mark.parametrize("name", ["hgx_h100_healthy", "hgx_h100_degraded", "cpu_only", "pcie_workstation_2gpu"])
def test_every_recorded_snapshot_and_this_nodes_fit_the_schema(name):
    with open(os.path.join(FIXTURES, f"{name}.json")) as f:
        doctor.check_snapshot(json.load(f), name)
    from commbench.node.topo import snapshot
    doctor.check_snapshot(json.loads(json.dumps(snapshot())), "this node")
