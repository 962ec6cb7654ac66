"""Topology and health inventory: GPUs through NVML, the host from /proc and /sys.

`snapshot()` returns a JSON-able dict (documented in docs/commands/node.md, schema "commbench-topo-1"). The GPU
part goes through the narrow `Nvml` interface so that tests can feed recorded values; on a host
without the NVML library or without GPUs it says why and the host part is still complete.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import platform
from typing import Any, Callable, Optional

from . import machine

TOPO_SCHEMA = "commbench-topo-1"

# nvmlClocksEventReasons bits (nvml.h): which ones mean a GPU runs below its clocks for a reason
# that matters to a benchmark.
CLOCK_EVENT_BITS = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting",
}

# nvmlGpuTopologyLevel_t -> the labels of `nvidia-smi topo -m`.
TOPOLOGY_LABELS = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
NVLINK_MAX_LINKS = 18


def _read(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _int(text: Optional[str]) -> Optional[int]:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def cpulist_to_set(text: str) -> set[int]:
    """'0-3,8,10-11' -> {0, 1, 2, 3, 8, 10, 11}."""
    out: set[int] = set()
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def set_to_cpulist(cpus) -> str:
    cpus = sorted(cpus)
    parts, i = [], 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        parts.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(parts)


# ---- host -----------------------------------------------------------------------------------------

def _port_state(text: Optional[str]) -> Optional[str]:
    """An InfiniBand port's "4: ACTIVE" or "2: Polling" -> the word, as ibstat prints it."""
    return (text or "").split(":")[-1].strip() or None


def _pci_model(device: str) -> Optional[str]:
    """'15b3:1021' (PCI vendor:device) of a sysfs device folder: the model of a NIC, an HCA or a switch
    as the kernel knows it, without a database of names."""
    vendor, dev = _read(os.path.join(device, "vendor")), _read(os.path.join(device, "device"))
    if not vendor or not dev:
        return None
    return f"{vendor.lower().removeprefix('0x')}:{dev.lower().removeprefix('0x')}"


def _bus_of(device: str) -> Optional[str]:
    """The bus a device hangs on ('pci', 'usb', 'virtio'...), or None for none (a virtual NIC)."""
    link = os.path.join(device, "subsystem")
    return os.path.basename(os.path.realpath(link)) if os.path.islink(link) else None


def _driver(device: str) -> Optional[str]:
    link = os.path.join(device, "driver")
    return os.path.basename(os.path.realpath(link)) if os.path.islink(link) else None


# nvmlDeviceGetNvLinkVersion answers with nvmlNvlinkVersion_t, not the version: 4 and 5 are NVLink
# 3.0 and 3.1 (A100), 6 is 4.0 (H100), 7 is 5.0 (B200). The snapshot keeps the major version.
NVLINK_MAJOR = {1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 5, 8: 6}

# NVIDIA's PCI vendor id, and the class of the NVSwitches a baseboard shows its host (a bridge of
# class 'other', 0x0680: HGX A100 and H100 boards list theirs so; a rack's switch trays show none).
NVIDIA_VENDOR, BRIDGE_OTHER = "0x10de", "0x0680"


def nvswitches(sys_root: str = "/") -> list[dict]:
    out = []
    for dev in sorted(glob.glob(os.path.join(sys_root, "sys", "bus", "pci", "devices", "*"))):
        if (_read(os.path.join(dev, "vendor")) or "").lower() == NVIDIA_VENDOR and \
                (_read(os.path.join(dev, "class")) or "").lower().startswith(BRIDGE_OTHER):
            out.append({"bus_id": os.path.basename(dev), "model": _pci_model(dev)})
    return out


def host_part(sys_root: str = "/") -> dict:
    """CPU, NUMA, network and InfiniBand facts, from /proc and /sys under sys_root."""
    at = lambda *p: os.path.join(sys_root, *p)  # noqa: E731
    cpuinfo = _read(at("proc", "cpuinfo")) or ""
    sockets = {line.split(":")[1].strip() for line in cpuinfo.splitlines() if line.startswith("physical id")}
    numa = []
    for node in sorted(glob.glob(at("sys", "devices", "system", "node", "node[0-9]*")),
                       key=lambda p: int(p.rsplit("node", 1)[1])):
        mem = _read(os.path.join(node, "meminfo")) or ""
        total = next((int(line.split()[-2]) * 1024 for line in mem.splitlines() if "MemTotal" in line), None)
        numa.append({"node": int(node.rsplit("node", 1)[1]), "cpus": _read(os.path.join(node, "cpulist")),
                     "memory_bytes": total})
    nics = []
    for path in sorted(glob.glob(at("sys", "class", "net", "*"))):
        name = os.path.basename(path)
        kind = {1: "ethernet", 32: "infiniband", 772: "loopback"}.get(_int(_read(os.path.join(path, "type"))), "other")
        speed = _int(_read(os.path.join(path, "speed")))
        device = os.path.join(path, "device")
        nics.append({"name": name, "type": kind, "state": _read(os.path.join(path, "operstate")),
                     "mtu": _int(_read(os.path.join(path, "mtu"))),
                     "speed_mbps": speed if speed is not None and speed > 0 else None,
                     "virtual": not os.path.exists(device), "model": _pci_model(device), "driver": _driver(device),
                     "bus": _bus_of(device), "sriov_vf": os.path.exists(os.path.join(device, "physfn"))})
    hcas = []
    for port in sorted(glob.glob(at("sys", "class", "infiniband", "*", "ports", "*"))):
        rate = _read(os.path.join(port, "rate")) or ""
        hca_dir = os.path.dirname(os.path.dirname(port))
        hcas.append({"hca": port.split(os.sep)[-3], "port": int(os.path.basename(port)),
                     "model": _pci_model(os.path.join(hca_dir, "device")),
                     "rate_gbps": float(rate.split()[0]) if rate[:1].isdecimal() else None,
                     "state": _port_state(_read(os.path.join(port, "state"))),
                     "phys_state": _port_state(_read(os.path.join(port, "phys_state"))),
                     "link_layer": _read(os.path.join(port, "link_layer"))})
    return {
        "hostname": platform.node(),
        "cpu_model": machine.cpu_model(),
        "sockets": max(len(sockets), 1),
        "cores": machine.cores(),
        "memory_bytes": machine.meminfo_bytes("MemTotal"),
        "numa_nodes": numa,
        "kernel": platform.release(),
        "os": platform.platform(),
        "nics": nics,
        "infiniband": hcas,
        "nvswitches": nvswitches(sys_root),
    }


def library_versions(nccl: bool = True) -> dict:
    """The libraries' versions; NCCL's is asked of commbench._cuda, which loads torch, so a run on host
    buffers (nccl False) and a host without the CUDA driver record none."""
    from .gpu import driver_loads
    torch = machine.torch_version()
    version = None
    if nccl and driver_loads():
        from .gpu import cuda_module
        mod = cuda_module()
        if mod is not None:
            version = mod.versions().split("NCCL ")[-1].split(";")[0]
    return {"mpi": machine.mpi_version(), "nccl": version, "torch": torch.__version__, "torch_cuda": torch.cuda}


# ---- GPUs -----------------------------------------------------------------------------------------

class Nvml:
    """The NVML calls commbench uses, through nvidia-ml-py. Every query that a GPU or driver may not
    support returns None instead of raising."""

    def __init__(self):
        import pynvml
        self.nv = pynvml
        pynvml.nvmlInit()

    def close(self) -> None:
        self.nv.nvmlShutdown()

    def q(self, fn: Callable, *args, default=None):
        try:
            return fn(*args)
        except self.nv.NVMLError:
            return default

    def driver(self) -> dict:
        cuda = self.q(self.nv.nvmlSystemGetCudaDriverVersion)
        return {"driver": _text(self.q(self.nv.nvmlSystemGetDriverVersion)),
                "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None}

    def count(self) -> int:
        return self.nv.nvmlDeviceGetCount()

    def handle(self, i: int):
        return self.nv.nvmlDeviceGetHandleByIndex(i)

    def handle_by_bus(self, bus_id: str):
        """The GPU at a PCI bus id as CUDA gives it (NVML takes either width of domain)."""
        return self.nv.nvmlDeviceGetHandleByPciBusId(bus_id)

    def cpus(self, h, cores: int) -> set[int]:
        """The CPUs NVML calls ideal for the GPU (those of its NUMA node); empty where it cannot say."""
        mask = self.q(self.nv.nvmlDeviceGetCpuAffinity, h, (cores + 63) // 64)
        return {w * 64 + b for w, word in enumerate(mask or []) for b in range(64) if word >> b & 1}

    def device(self, h, cores: int) -> dict:
        nv = self.nv
        pci = self.q(nv.nvmlDeviceGetPciInfo, h)
        links = []
        for link in range(NVLINK_MAX_LINKS):
            state = self.q(nv.nvmlDeviceGetNvLinkState, h, link)
            if state is None:
                continue
            remote = self.q(nv.nvmlDeviceGetNvLinkRemotePciInfo, h, link)
            links.append({"up": bool(state), "version": NVLINK_MAJOR.get(self.q(nv.nvmlDeviceGetNvLinkVersion, h, link)),
                          "remote_bus_id": _bus(remote.busId) if remote is not None else None})
        cpus = self.cpus(h, cores)
        reasons = self.q(getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
                         or nv.nvmlDeviceGetCurrentClocksThrottleReasons, h)
        remap = self.q(nv.nvmlDeviceGetRemappedRows, h)
        ecc = {}
        for kind, counter in (("volatile", nv.NVML_VOLATILE_ECC), ("aggregate", nv.NVML_AGGREGATE_ECC)):
            ecc[f"{kind}_uncorrected"] = self.q(nv.nvmlDeviceGetTotalEccErrors, h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, counter)
            ecc[f"{kind}_corrected"] = self.q(nv.nvmlDeviceGetTotalEccErrors, h, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, counter)
        power = self.q(nv.nvmlDeviceGetPowerUsage, h)
        limit = self.q(nv.nvmlDeviceGetEnforcedPowerLimit, h)
        procs = self.q(nv.nvmlDeviceGetComputeRunningProcesses, h, default=[]) or []
        mode = self.q(nv.nvmlDeviceGetComputeMode, h)
        mig = self.q(nv.nvmlDeviceGetMigMode, h)  # (current, pending); not supported below Ampere
        return {
            "name": _text(self.q(nv.nvmlDeviceGetName, h)),
            "uuid": _text(self.q(nv.nvmlDeviceGetUUID, h)),
            "pci_bus_id": _bus(pci.busId) if pci is not None else None,
            "pcie": {"gen_current": self.q(nv.nvmlDeviceGetCurrPcieLinkGeneration, h),
                     "gen_max": self.q(nv.nvmlDeviceGetMaxPcieLinkGeneration, h),
                     "width_current": self.q(nv.nvmlDeviceGetCurrPcieLinkWidth, h),
                     "width_max": self.q(nv.nvmlDeviceGetMaxPcieLinkWidth, h)},
            "nvlink_links": links,
            "cpu_affinity": set_to_cpulist(cpus) if cpus else None,
            "clocks_mhz": {"sm": self.q(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
                           "sm_max": self.q(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM),
                           "mem": self.q(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM)},
            "clock_event_reasons": [name for bit, name in CLOCK_EVENT_BITS.items() if reasons and reasons & bit],
            "temperature_c": self.q(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
            "power_w": power / 1000 if power is not None else None,
            "power_limit_w": limit / 1000 if limit is not None else None,
            "ecc": ecc,
            "remapped_rows": None if remap is None else {"correctable": remap[0], "uncorrectable": remap[1],
                                                         "pending": bool(remap[2]), "failure": bool(remap[3])},
            "processes": [{"pid": p.pid, "used_memory_bytes": p.usedGpuMemory} for p in procs],
            "compute_mode": COMPUTE_MODES.get(mode, f"mode {mode}") if mode is not None else None,
            "mig": None if mig is None else bool(mig[0]),
        }

    def pair(self, a, b) -> dict:
        nv = self.nv

        def p2p(index):
            status = self.q(nv.nvmlDeviceGetP2PStatus, a, b, index)
            return None if status is None else ("OK" if status == nv.NVML_P2P_STATUS_OK else f"status {status}")
        return {"read": p2p(nv.NVML_P2P_CAPS_INDEX_READ), "write": p2p(nv.NVML_P2P_CAPS_INDEX_WRITE),
                "nvlink": p2p(nv.NVML_P2P_CAPS_INDEX_NVLINK),
                "level": self.q(nv.nvmlDeviceGetTopologyCommonAncestor, a, b)}


# nvmlComputeMode_t (1, exclusive thread, is gone from current drivers).
COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}


def _text(v) -> Optional[str]:
    return v.decode() if isinstance(v, bytes) else v


def _bus(bus_id) -> str:
    """NVML's '00000000:18:00.0' -> sysfs's '0000:18:00.0'."""
    text = _text(bus_id).lower()
    domain, _, rest = text.partition(":")
    return f"{domain[-4:]}:{rest}"


def gpu_part(nvml_factory: Callable[[], Any] = Nvml, sys_root: str = "/") -> tuple[dict, list, list]:
    """(gpus section, p2p matrix, topology matrix). Without NVML or GPUs the section says why."""
    try:
        nvml = nvml_factory()
    except ImportError:
        return {"available": False, "reason": "nvidia-ml-py is not installed", "devices": []}, [], []
    except Exception as e:  # noqa: BLE001 - NVMLError_LibraryNotFound, _DriverNotLoaded, ...
        return {"available": False, "reason": f"NVML unavailable: {e}", "devices": []}, [], []
    try:
        return _gpus_from(nvml, sys_root)
    except Exception as e:  # noqa: BLE001 - a GPU lost or hidden mid-query: say so, keep the host part
        return {"available": False, "reason": f"NVML query failed: {e}", "devices": []}, [], []
    finally:
        nvml.close()


def _gpus_from(nvml, sys_root: str) -> tuple[dict, list, list]:
    """The GPU section, P2P matrix and topology matrix from an open NVML session."""
    count = nvml.count()
    if count == 0:
        return {"available": False, "reason": "NVML found no GPU", "devices": [], **nvml.driver()}, [], []
    handles = [nvml.handle(i) for i in range(count)]
    devices = []
    for i, h in enumerate(handles):
        d = {"index": i, **nvml.device(h, machine.cores())}
        up = sum(1 for link in d["nvlink_links"] if link["up"])
        versions = {link["version"] for link in d["nvlink_links"] if link["up"] and link["version"]}
        d["nvlink"] = {"links_up": up, "links_total": len(d["nvlink_links"]),
                       "version": max(versions) if versions else None}
        d["numa_node"] = _int(_read(os.path.join(sys_root, "sys", "bus", "pci", "devices", d["pci_bus_id"],
                                                 "numa_node"))) if d["pci_bus_id"] else None
        devices.append(d)
    pairs = [[nvml.pair(a, b) if i != j else None for j, b in enumerate(handles)] for i, a in enumerate(handles)]
    p2p = [[None if c is None else {k: c[k] for k in ("read", "write", "nvlink")} for c in row] for row in pairs]
    topology = topology_matrix(devices, [[None if c is None else c["level"] for c in row] for row in pairs])
    return {"available": True, "reason": None, **nvml.driver(), "devices": devices}, p2p, topology


def topology_matrix(devices: list, levels: list) -> list:
    """The pairwise matrix of `nvidia-smi topo -m`: X on the diagonal, NV<links> where NVLink joins
    the pair (directly, or through NVSwitches when links lead to no GPU), else the PCIe level."""
    bus_ids = {d["pci_bus_id"] for d in devices}
    out = []
    for i, a in enumerate(devices):
        row = []
        for j, b in enumerate(devices):
            if i == j:
                row.append("X")
                continue
            direct = sum(1 for link in a["nvlink_links"] if link["up"] and link["remote_bus_id"] == b["pci_bus_id"])
            switched = all(link["remote_bus_id"] not in bus_ids for link in a["nvlink_links"] + b["nvlink_links"] if link["up"])
            if direct:
                row.append(f"NV{direct}")
            elif switched and a["nvlink"]["links_up"] and b["nvlink"]["links_up"]:
                row.append(f"NV{min(a['nvlink']['links_up'], b['nvlink']['links_up'])}")
            else:
                row.append(TOPOLOGY_LABELS.get(levels[i][j], "?"))
        out.append(row)
    return out


def snapshot(nvml_factory: Callable[[], Any] = Nvml, nccl: bool = True) -> dict:
    """The node as this process sees it; `nccl`: ask commbench._cuda for NCCL's version (library_versions)."""
    gpus, p2p, topology = gpu_part(nvml_factory)
    snap = {"schema": TOPO_SCHEMA, "host": host_part(), "gpus": gpus, "p2p": p2p, "topology": topology,
            "libraries": library_versions(nccl),
            "process": {"pid": os.getpid(), "cpu_affinity": set_to_cpulist(os.sched_getaffinity(0)),
                        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                        "local_rank": os.environ.get("LOCAL_RANK") or os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK")
                        or os.environ.get("SLURM_LOCALID")}}
    snap["fingerprint"] = fingerprint(snap)
    return snap


def fingerprint(snap: dict) -> str:
    """A short hash of what should not change between two runs on the same kind of node: models,
    counts, link capabilities, topology, NUMA layout, InfiniBand rates. Temperatures, clocks,
    processes and the like are left out."""
    gpus = [{"name": d["name"], "pcie_max": [d["pcie"]["gen_max"], d["pcie"]["width_max"]],
             "nvlink_total": d["nvlink"]["links_total"]} for d in snap["gpus"].get("devices", [])]
    host = snap["host"]
    stable = {"cpu": host["cpu_model"], "sockets": host["sockets"], "cores": host["cores"],
              "numa": [n["cpus"] for n in host["numa_nodes"]], "gpus": gpus, "topology": snap["topology"],
              "ib": sorted((p["hca"], p["port"], p["rate_gbps"]) for p in host["infiniband"])}
    return hashlib.sha256(json.dumps(stable, sort_keys=True).encode()).hexdigest()[:16]
