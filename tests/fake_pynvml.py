"""A stand-in for the pynvml module, answering from a node description with NVML's own conventions
(bytes or str names, 8-digit PCI domains, milliwatts, bitmask clock-event reasons, NVMLError for
unsupported queries), so that commbench.topo.Nvml runs unchanged against it."""

import types

NVML_P2P_STATUS_OK = 0
NVML_P2P_STATUS_NOT_SUPPORTED = 5


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


def make(gpus: list, driver="550.54.15", cuda=12040) -> types.ModuleType:
    """gpus: dicts with name, bus, pcie (gen_cur, gen_max, w_cur, w_max), links (list of (up, remote_bus)),
    nvlink_version (as NVML answers it, nvmlNvlinkVersion_t: 4 is NVLink 3.0, 6 is 4.0), cpus (set),
    reasons (bitmask), temp, power_mw, limit_mw, ecc (uncorrected volatile),
    remap (corr, unc, pending, failure), procs (list of (pid, bytes)), p2p (dict peer_index -> status),
    level (dict peer_index -> NVML topology level)."""
    m = types.ModuleType("pynvml")
    m.NVMLError = NVMLError
    for name, value in dict(NVML_P2P_STATUS_OK=0, NVML_P2P_CAPS_INDEX_READ=0, NVML_P2P_CAPS_INDEX_WRITE=1,
                            NVML_P2P_CAPS_INDEX_NVLINK=2, NVML_CLOCK_SM=1, NVML_CLOCK_MEM=2, NVML_TEMPERATURE_GPU=0,
                            NVML_VOLATILE_ECC=0, NVML_AGGREGATE_ECC=1, NVML_MEMORY_ERROR_TYPE_CORRECTED=0,
                            NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1).items():
        setattr(m, name, value)
    state = {"init": 0}
    m.nvmlInit = lambda: state.__setitem__("init", state["init"] + 1)
    m.nvmlShutdown = lambda: state.__setitem__("init", state["init"] - 1)
    m.nvmlSystemGetDriverVersion = lambda: driver
    m.nvmlSystemGetCudaDriverVersion = lambda: cuda
    m.nvmlDeviceGetCount = lambda: len(gpus)
    m.nvmlDeviceGetHandleByIndex = lambda i: i

    def by_bus(bus_id):  # either width of domain, either case, as NVML takes it
        wanted = (bus_id.decode() if isinstance(bus_id, bytes) else bus_id).lower().split(":", 1)[1]
        for i, gpu in enumerate(gpus):
            if gpu["bus"].lower() == wanted:
                return i
        raise NVMLError(f"no GPU at {bus_id}")
    m.nvmlDeviceGetHandleByPciBusId = by_bus
    g = lambda h: gpus[h]  # noqa: E731
    m.nvmlDeviceGetName = lambda h: g(h)["name"].encode()
    m.nvmlDeviceGetUUID = lambda h: f"GPU-{h:08x}-0000-0000-0000-000000000000"
    m.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=("00000000:" + g(h)["bus"].upper()).encode())
    m.nvmlDeviceGetCurrPcieLinkGeneration = lambda h: g(h)["pcie"][0]
    m.nvmlDeviceGetMaxPcieLinkGeneration = lambda h: g(h)["pcie"][1]
    m.nvmlDeviceGetCurrPcieLinkWidth = lambda h: g(h)["pcie"][2]
    m.nvmlDeviceGetMaxPcieLinkWidth = lambda h: g(h)["pcie"][3]

    def link(h, i):
        if i >= len(g(h)["links"]):
            raise NVMLError_NotSupported("link")
        return g(h)["links"][i]
    m.nvmlDeviceGetNvLinkState = lambda h, i: 1 if link(h, i)[0] else 0
    m.nvmlDeviceGetNvLinkVersion = lambda h, i: (link(h, i), g(h)["nvlink_version"])[1]
    m.nvmlDeviceGetNvLinkRemotePciInfo = lambda h, i: types.SimpleNamespace(busId=("00000000:" + link(h, i)[1].upper()).encode())

    def affinity(h, words):
        mask = [0] * words
        for c in g(h)["cpus"]:
            mask[c // 64] |= 1 << (c % 64)
        return mask
    m.nvmlDeviceGetCpuAffinity = affinity
    m.nvmlDeviceGetClockInfo = lambda h, kind: g(h).get("sm", 1980) if kind == 1 else 2619
    m.nvmlDeviceGetMaxClockInfo = lambda h, kind: 1980
    m.nvmlDeviceGetCurrentClocksEventReasons = lambda h: g(h)["reasons"]
    m.nvmlDeviceGetTemperature = lambda h, s: g(h)["temp"]
    m.nvmlDeviceGetPowerUsage = lambda h: g(h)["power_mw"]
    m.nvmlDeviceGetEnforcedPowerLimit = lambda h: g(h)["limit_mw"]

    def ecc(h, kind, counter):
        if g(h).get("ecc") is None:
            raise NVMLError_NotSupported("ecc")
        return g(h)["ecc"] if kind == 1 and counter == 0 else 0
    m.nvmlDeviceGetTotalEccErrors = ecc

    def remap(h):
        if g(h).get("remap") is None:
            raise NVMLError_NotSupported("remap")
        return g(h)["remap"]
    m.nvmlDeviceGetRemappedRows = remap
    m.nvmlDeviceGetComputeRunningProcesses = lambda h: [types.SimpleNamespace(pid=p, usedGpuMemory=b)
                                                        for p, b in g(h)["procs"]]
    m.nvmlDeviceGetComputeMode = lambda h: g(h).get("compute_mode", 0)

    def mig(h):
        if g(h).get("mig") is None:
            raise NVMLError_NotSupported("mig")
        return g(h)["mig"]
    m.nvmlDeviceGetMigMode = mig
    m.nvmlDeviceGetP2PStatus = lambda a, b, idx: g(a)["p2p"].get(b, NVML_P2P_STATUS_OK)
    m.nvmlDeviceGetTopologyCommonAncestor = lambda a, b: g(a)["level"][b]
    m.state = state
    return m
