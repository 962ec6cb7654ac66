"""Preflight checks over a topology snapshot (topo.py): each PASS, WARN or FAIL with its evidence and
a one-line remedy. Works the same on a live snapshot and on one saved earlier (`--from`)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib import resources
from typing import Optional

from ..errors import CommbenchError
from .topo import cpulist_to_set

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"

# Clock-event reasons that slow a benchmark for a cause worth fixing.
THROTTLE_FAIL = {"hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown", "hw_power_brake_slowdown"}
THROTTLE_WARN = {"sw_power_cap"}
# Pairs that should reach each other directly: over NVLink or under one PCIe switch.
PEER_EXPECTED = ("NV", "PIX", "PXB")
# InfiniBand port states (/sys/class/infiniband/*/ports/*/state and phys_state). A port whose link
# trained but was never put in service (no subnet manager, a port stuck in training) or keeps
# retraining has a broken link; a port that polls for a peer or is switched off is merely unused.
IB_STUCK_STATES = {"INIT", "ARMED"}
IB_LINKED_PHYS_STATES = {"LinkUp", "LinkErrorRecovery"}




@lru_cache(maxsize=None)
def _validator(name: str):
    import jsonschema
    return jsonschema.Draft202012Validator(json.loads(
        resources.files("commbench").joinpath(f"schema/{name}.schema.json").read_text()))


def _first_problem(doc, name: str) -> Optional[str]:
    errors = sorted(_validator(name).iter_errors(doc), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    err = errors[0]
    if err.validator == "additionalProperties":
        unknown = sorted(set(err.instance) - set(err.schema.get("properties", {})))
        return f"unknown key '{unknown[0]}'; known keys: {', '.join(err.schema.get('properties', {}))}"
    where = "/".join(str(p) for p in err.absolute_path)
    return f"invalid field '{where}': {err.message}" if where else err.message


def check_snapshot(snap, source: str) -> None:
    """Refuses, in one line naming the first bad field, a snapshot doctor cannot judge (schema/
    topo.schema.json): a hand-edited or truncated file must not read as a node's failure."""
    problem = _first_problem(snap, "topo") or _shape_problem(snap)
    if problem:
        raise CommbenchError(f"--from {source}: not a usable snapshot from 'commbench topo --json': {problem}")


def _shape_problem(snap: dict) -> Optional[str]:
    """What a schema cannot say: the link and peer matrices are one row and column per GPU."""
    n = len(snap["gpus"].get("devices") or [])
    for name in ("topology", "p2p"):
        matrix = snap.get(name) or []
        if matrix and (len(matrix) != n or any(len(row) != n for row in matrix)):
            return f"invalid field '{name}': not {n} x {n}, one row and column per GPU"
    return None


def check_expect(expect, source: str) -> None:
    """Refuses a node-class description that is not one (schema/expect.schema.json): an empty one, an
    unknown key, a count below 0 is bad input, not a node that fails."""
    problem = _first_problem(expect, "expect")
    if problem:
        raise CommbenchError(f"--expect {source}: {problem} (e.g. {{\"gpus\": 8, \"nvlinks_per_gpu\": 18}})")


@dataclass
class Check:
    name: str
    status: str
    evidence: str
    remedy: str = ""


def _gpu_checks(snap: dict) -> list[Check]:
    gpus = snap["gpus"]
    if not gpus.get("available"):
        return [Check("gpus", PASS, f"no GPU checks: {gpus.get('reason')}")]
    out = []
    devices = gpus["devices"]
    for d in devices:
        tag = f"GPU {d['index']} ({d['pci_bus_id']})"
        p = d["pcie"]
        if None not in (p["width_current"], p["width_max"]) and p["width_current"] < p["width_max"]:
            out.append(Check("pcie_width", FAIL, f"{tag}: PCIe x{p['width_current']} of x{p['width_max']}",
                             "reseat the GPU or its riser, check the slot and BIOS lane settings"))
        elif None not in (p["gen_current"], p["gen_max"]) and p["gen_current"] < p["gen_max"]:
            idle = "gpu_idle" in d["clock_event_reasons"]
            out.append(Check("pcie_gen", PASS if idle else WARN,
                             f"{tag}: PCIe Gen{p['gen_current']} of Gen{p['gen_max']}" + (" while idle" if idle else ""),
                             "" if idle else "GPUs drop link speed when idle; if it stays low under load, check the slot, riser and BIOS"))
        else:
            out.append(Check("pcie", PASS, f"{tag}: PCIe Gen{p['gen_current']} x{p['width_current']}"))
        out += _nvlink_checks(tag, d["nvlink"], len(devices))
        reasons = set(d["clock_event_reasons"])
        if reasons & THROTTLE_FAIL:
            out.append(Check("throttle", FAIL, f"{tag}: clocks held down by {', '.join(sorted(reasons & THROTTLE_FAIL))} "
                             f"(SM {d['clocks_mhz']['sm']} of {d['clocks_mhz']['sm_max']} MHz, {d['temperature_c']} C)",
                             "check cooling, fans and power delivery; results now would understate the node"))
        elif reasons & THROTTLE_WARN:
            out.append(Check("throttle", WARN, f"{tag}: at its power cap ({d['power_w']} of {d['power_limit_w']} W)",
                             "expected under full load; if idle, check the power limit (`nvidia-smi -q -d POWER`)"))
        out += _memory_checks(tag, d.get("ecc") or {}, d.get("remapped_rows"))
        mine = snap.get("process", {}).get("pid")
        foreign = [pr for pr in d["processes"] if pr["pid"] != mine]
        if foreign:
            used = sum(pr["used_memory_bytes"] or 0 for pr in foreign) / 2**30
            out.append(Check("foreign_processes", WARN,
                             f"{tag}: {len(foreign)} other process(es) hold {used:.1f} GiB (pids "
                             f"{', '.join(str(pr['pid']) for pr in foreign[:5])})",
                             "stop them or pick an idle node; they share the GPU and its links"))
        out += _mode_checks(tag, d.get("compute_mode"), d.get("mig"))
        affinity = snap.get("process", {}).get("cpu_affinity")
        if affinity and d["cpu_affinity"] and not cpulist_to_set(affinity) & cpulist_to_set(d["cpu_affinity"]):
            out.append(Check("cpu_affinity", WARN, f"{tag}: this process runs on CPUs {affinity}, the GPU is local "
                             f"to {d['cpu_affinity']}", "bind each rank to its GPU's NUMA node (mpirun --map-by numa, srun --cpu-bind)"))
    out += _driver_checks(gpus.get("cuda_driver"), snap.get("libraries", {}).get("torch_cuda"))
    out += _peer_checks(snap)
    out += _mapping_checks(snap, len(devices))
    return out


def _release(text: str) -> tuple:
    return tuple(int(x) for x in text.split("."))


def _driver_checks(driver: Optional[str], runtime: Optional[str]) -> list[Check]:
    """The newest CUDA the driver supports against the CUDA torch (and commbench._cuda) is built for:
    an older driver fails every CUDA call at once."""
    if not driver or not runtime:
        return []
    if _release(driver) < _release(runtime):
        return [Check("cuda_driver", FAIL, f"the driver supports CUDA {driver}, torch and commbench._cuda are built for "
                      f"CUDA {runtime}: every CUDA call fails",
                      f"make install TORCH_CUDA=cu{driver.replace('.', '')} (a torch built for the driver's CUDA), "
                      f"or a driver for CUDA {runtime}")]
    return [Check("cuda_driver", PASS, f"the driver supports CUDA {driver}, torch is built for CUDA {runtime}")]


def _mode_checks(tag: str, mode: Optional[str], mig: Optional[bool]) -> list[Check]:
    """The compute mode (absent from snapshots of earlier versions: nothing to say) and MIG."""
    out = []
    if mode == "prohibited":
        out.append(Check("compute_mode", FAIL, f"{tag}: compute mode prohibited: no process may use it",
                         "nvidia-smi -i GPU -c DEFAULT (as root)"))
    elif mode in ("exclusive_process", "exclusive_thread"):
        out.append(Check("compute_mode", WARN, f"{tag}: compute mode {mode}: one process at a time",
                         "a rank per GPU works; anything else that holds a context there (a monitor, a second run, "
                         "tests) makes the ranks fail to start; nvidia-smi -i GPU -c DEFAULT (as root) lifts it"))
    if mig:
        out.append(Check("mig", WARN, f"{tag}: MIG mode on: processes see MIG instances (MIG-...), not the GPU",
                         "NCCL and peer copies do not cross MIG instances; for interconnect checks disable MIG "
                         "(nvidia-smi -i GPU -mig 0, as root)"))
    return out


def _nvlink_checks(tag: str, nv: dict, gpus: int) -> list[Check]:
    if not nv["links_total"]:
        return []
    if nv["links_up"] == nv["links_total"]:
        return [Check("nvlink", PASS, f"{tag}: {nv['links_up']}/{nv['links_total']} NVLinks up")]
    if nv["links_up"] == 0 and gpus == 1:
        # A one-GPU slice of a node (or a VM) has no peer to train its links with.
        return [Check("nvlink", PASS, f"{tag}: NVLink inactive: no peer GPU visible")]
    return [Check("nvlink", FAIL, f"{tag}: {nv['links_up']} of {nv['links_total']} NVLinks up",
                  "inspect `nvidia-smi nvlink -s`; reset the GPU or have the baseboard serviced")]


def _memory_checks(tag: str, ecc: dict, remap: Optional[dict]) -> list[Check]:
    """The volatile ECC counters and row remapping describe this boot: errors there are a fault now.
    The aggregate counters keep every earlier boot too; errors only there are history (their pages
    retired, their rows remapped), worth watching but not a fault."""
    now = []
    if ecc.get("volatile_uncorrected"):
        now.append(f"{ecc['volatile_uncorrected']} uncorrected ECC error(s) since boot")
    if remap and (remap["pending"] or remap["failure"]):
        now.append("row remapping " + ("pending" if remap["pending"] else "failed"))
    if now:
        return [Check("memory_errors", FAIL, f"{tag}: {', '.join(now)}",
                      "drain the node; a pending remap clears with a GPU reset, a failed one needs service")]
    if ecc.get("aggregate_uncorrected"):
        since_boot = ", none since boot" if ecc.get("volatile_uncorrected") == 0 else ""
        return [Check("memory_errors", WARN, f"{tag}: {ecc['aggregate_uncorrected']} uncorrected ECC error(s) "
                      f"in the GPU's lifetime{since_boot}",
                      "a record of past faults; if the count grows, have the GPU checked "
                      "(`nvidia-smi -q -d ECC,ROW_REMAPPER`)")]
    return []


def _peer_checks(snap: dict) -> list[Check]:
    out = []
    topo, p2p = snap["topology"], snap.get("p2p") or []  # absent: no peer matrix was taken
    for i, row in enumerate(p2p):
        for j, cell in enumerate(row):
            if cell is None or j <= i:
                continue
            link = topo[i][j]
            ok = cell["read"] == "OK" and cell["write"] == "OK"
            if not ok and link.startswith(PEER_EXPECTED):
                out.append(Check("peer_access", FAIL, f"GPU {i} <-> GPU {j} ({link}): P2P read {cell['read']}, "
                                 f"write {cell['write']}", "enable P2P: check IOMMU/ACS settings in the BIOS and kernel "
                                 "(iommu=pt), and the driver's P2P registry keys"))
            elif not ok:
                out.append(Check("peer_access", PASS, f"GPU {i} <-> GPU {j} ({link}): no P2P, as expected across {link}"))
    if p2p and not out:
        out.append(Check("peer_access", PASS, f"P2P read/write OK between all {len(p2p)} GPUs"))
    return out


def _mapping_checks(snap: dict, gpus: int) -> list[Check]:
    proc = snap.get("process", {})
    cvd = proc.get("cuda_visible_devices")
    out = []
    if cvd:
        ids = [x.strip() for x in cvd.split(",") if x.strip()]
        dupes = sorted({x for x in ids if ids.count(x) > 1})
        if dupes:
            out.append(Check("gpu_mapping", FAIL, f"CUDA_VISIBLE_DEVICES={cvd} lists {', '.join(dupes)} twice",
                             "list each GPU once; two ranks on one GPU measure contention, not the fabric"))
    local = proc.get("local_rank")
    if local is not None and gpus and int(local) >= gpus:
        out.append(Check("gpu_mapping", FAIL, f"local rank {local} but {gpus} GPU(s) visible: ranks would share GPUs",
                         f"launch at most {gpus} ranks per node"))
    return out


def _infiniband_checks(ports: list) -> list[Check]:
    fastest: dict = {}  # per link layer: an Ethernet (RoCE) port may rightly run slower than an IB one
    for p in ports:
        if p["state"] == "ACTIVE" and p["rate_gbps"]:
            fastest[p["link_layer"]] = max(fastest.get(p["link_layer"], 0), p["rate_gbps"])
    out = []
    for p in ports:
        tag = f"{p['hca']} port {p['port']}"
        phys = p.get("phys_state")  # absent from snapshots taken before it was recorded
        state = f"state {p['state']}" + (f", physical state {phys}" if phys else "")
        top = fastest.get(p["link_layer"])
        if p["state"] == "ACTIVE" and p["rate_gbps"] and p["rate_gbps"] < top:
            out.append(Check("infiniband", FAIL, f"{tag}: ACTIVE at {p['rate_gbps']} Gb/s, below the {top} Gb/s of "
                             f"the other {p['link_layer']} ports", "the link trained below its rate: reseat or "
                             "replace the cable, check the switch port (`ibstat`)"))
        elif p["state"] == "ACTIVE":
            out.append(Check("infiniband", PASS, f"{tag}: ACTIVE at {p['rate_gbps']} Gb/s ({p['link_layer']})"))
        elif p["state"] in IB_STUCK_STATES or phys in IB_LINKED_PHYS_STATES:
            out.append(Check("infiniband", FAIL, f"{tag}: {state}: the link is up but not in service",
                             "check the cable and the switch port, and that a subnet manager runs on the fabric "
                             "(`sminfo`); `ibstat` shows both states"))
        else:
            out.append(Check("infiniband", WARN, f"{tag}: {state}: unused or down",
                             "fine if nothing is cabled to this port; if it should carry traffic, check the cable "
                             "and the switch port (`ibstat`)"))
    return out


def _network_checks(snap: dict) -> list[Check]:
    out = _infiniband_checks(snap["host"]["infiniband"])
    by_type: dict = {}
    for n in snap["host"]["nics"]:
        if n["state"] == "up" and not n["virtual"] and n["type"] in ("ethernet", "infiniband"):
            by_type.setdefault(n["type"], []).append(n)
    for kind, nics in by_type.items():
        mtus = {n["mtu"] for n in nics}
        if len(mtus) > 1:
            out.append(Check("mtu", WARN, f"{kind} interfaces differ in MTU: "
                             + ", ".join(f"{n['name']} {n['mtu']}" for n in nics),
                             "set one MTU on every interface of a fabric (and on its switches)"))
    return out


def _expect_checks(snap: dict, expect: dict) -> list[Check]:
    """Compares the snapshot with a node-class description, e.g.
    {"gpus": 8, "gpu_name": "H100", "nvlinks_per_gpu": 18, "pcie_gen": 5, "pcie_width": 16,
     "ib_ports": 8, "ib_rate_gbps": 400}."""
    devices = snap["gpus"].get("devices", [])
    ports = [p for p in snap["host"]["infiniband"]]
    out = []

    def check(name, ok, evidence, remedy):
        out.append(Check(f"expect_{name}", PASS if ok else FAIL, evidence, "" if ok else remedy))
    if "gpus" in expect:
        check("gpus", len(devices) == expect["gpus"], f"{len(devices)} GPU(s), expected {expect['gpus']}",
              "a GPU is missing from the bus or hidden by CUDA_VISIBLE_DEVICES; check `nvidia-smi -L` and dmesg")
    if "gpu_name" in expect:
        names = sorted({d["name"] for d in devices})
        check("gpu_name", bool(devices) and all(expect["gpu_name"] in d["name"] for d in devices),
              f"GPU model {', '.join(names) or 'none'}, expected {expect['gpu_name']}", "wrong node class or mixed GPUs")
    for d in devices:
        tag = f"GPU {d['index']}"
        if "nvlinks_per_gpu" in expect:
            check("nvlink", d["nvlink"]["links_up"] >= expect["nvlinks_per_gpu"],
                  f"{tag}: {d['nvlink']['links_up']} NVLinks up, expected {expect['nvlinks_per_gpu']}",
                  "NVLinks down or missing; see `nvidia-smi nvlink -s`")
        if "pcie_gen" in expect:
            check("pcie_gen", (d["pcie"]["gen_max"] or 0) >= expect["pcie_gen"],
                  f"{tag}: PCIe Gen{d['pcie']['gen_max']} max, expected Gen{expect['pcie_gen']}",
                  "the slot or BIOS caps the link generation")
        if "pcie_width" in expect:
            check("pcie_width", (d["pcie"]["width_current"] or 0) >= expect["pcie_width"],
                  f"{tag}: PCIe x{d['pcie']['width_current']}, expected x{expect['pcie_width']}",
                  "reseat the GPU or its riser")
    if "ib_ports" in expect:
        active = [p for p in ports if p["state"] == "ACTIVE"]
        check("ib_ports", len(active) >= expect["ib_ports"], f"{len(active)} active InfiniBand port(s), expected "
              f"{expect['ib_ports']}", "a port is down or an HCA is missing; check `ibstat`")
    if "ib_rate_gbps" in expect:
        for p in ports:
            check("ib_rate", (p["rate_gbps"] or 0) >= expect["ib_rate_gbps"],
                  f"{p['hca']} port {p['port']}: {p['rate_gbps']} Gb/s, expected {expect['ib_rate_gbps']}",
                  "the link trained below its rate: check the cable and the switch port")
    return out


def run_checks(snap: dict, expect: Optional[dict] = None) -> list[Check]:
    checks = _gpu_checks(snap) + _network_checks(snap)
    if expect is not None:
        checks += _expect_checks(snap, expect)
    return checks


def verdict_line(statuses: list[str]) -> str:
    """'doctor: 1 FAIL, 2 WARN, 20 PASS' for the statuses of a run's checks."""
    return "doctor: " + ", ".join(f"{statuses.count(s)} {s}" for s in (FAIL, WARN, PASS))


def exit_status(checks: list[Check]) -> int:
    return 1 if any(c.status == FAIL for c in checks) else 0


def as_json(checks: list[Check]) -> list[dict]:
    return [asdict(c) for c in checks]
