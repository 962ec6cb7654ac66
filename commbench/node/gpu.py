"""GPU availability, device selection and device-side data, shared by every GPU command.

Everything here answers "can this request run on a GPU, and on which one?" with one clear line
when the answer is no, before any buffer is allocated.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import sys
from typing import Optional

from ..errors import CommbenchError, NodeError

# cudaEventElapsedTime's resolution, "around 0.5 microseconds" (CUDA Runtime API reference): the
# floor under any single device-timed sample.
CUDA_EVENT_RESOLUTION_S = 0.5e-6

# Seconds one timed call may wait for its peers before the communicator is aborted.
DEFAULT_TIMEOUT_S = 300.0


# N emulated GPUs per host: every command loads the emulated build of commbench._cuda (tests/emu,
# `make emu`) instead of the real one. A test switch: nothing a GPU measures means anything there.
EMULATION = "COMMBENCH_GPU_EMULATION"


def emulated_build() -> str:
    """Where `make emu` puts the emulated extension: build/emu of the source tree, or
    COMMBENCH_EMU_BUILD."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.environ.get("COMMBENCH_EMU_BUILD") or os.path.join(root, "build", "emu")


def _load_emulated():
    import importlib.machinery
    import importlib.util
    if "commbench._cuda" in sys.modules:
        return sys.modules["commbench._cuda"], ""
    path = os.path.join(emulated_build(), "_cuda" + importlib.machinery.EXTENSION_SUFFIXES[0])
    if not os.path.exists(path):
        return None, f"{EMULATION} is set but the emulated commbench._cuda is not built ({path}; run `make emu`)"
    spec = importlib.util.spec_from_file_location("commbench._cuda", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["commbench._cuda"] = module
    spec.loader.exec_module(module)
    return module, ""


def _load():
    """(commbench._cuda, "") or (None, why it is absent)."""
    if os.environ.get(EMULATION):
        return _load_emulated()
    import importlib

    from .toolkit import read_build_info
    cuda = read_build_info().get("cuda", {})
    if "commbench._cuda" not in sys.modules:
        # The CUDA runtime and NCCL it was linked against, by path, first: the loader then cannot pick
        # another libcudart or libnccl from the system's path, and no torch is imported for them.
        for path in cuda.get("libraries", []):
            with contextlib.suppress(OSError):  # moved since the build: found as below, or not at all
                ctypes.CDLL(path)
    try:
        # import_module, not `from . import`: it honours sys.modules, so a stubbed-out module is absent
        # even after the package attribute was set by an earlier import.
        _cuda = importlib.import_module("commbench._cuda")
    except ImportError as e:
        if cuda.get("built") is False:
            return None, f"commbench._cuda was not built: {cuda.get('detail')}"
        if "torch" not in sys.modules and not isinstance(e, ModuleNotFoundError):
            # Its libraries are not where the build found them (an extension built elsewhere, or by an
            # older build linked against torch's): torch loads the ones it ships.
            import torch  # noqa: F401
            return _load()
        return None, f"commbench._cuda does not load: {e}"
    return _cuda, ""


def cuda_module():
    """commbench._cuda, or None when it is absent (cuda_absence() says why)."""
    return _load()[0]


def cuda_absence() -> str:
    """Why commbench._cuda is absent, or "" when it loads."""
    return _load()[1]


# The CUDA driver's library, which every CUDA runtime loads: where it does not load, no GPU is usable.
DRIVER_LIBRARY = "libcuda.so.1"
# The device files of the NVIDIA kernel driver, one per GPU: a GPU is on the host even where CUDA
# cannot use it (a driver older than the runtime, a user library that does not load).
DEVICE_FILES = "/dev/nvidia[0-9]*"


# Several ranks on one GPU, to check the multi-rank GPU path for correctness where a machine has fewer
# GPUs than ranks (a single lent GPU): each rank poses as a host of its own to NCCL (NCCL_HOSTID), which
# then talks over its socket transport on loopback. A functional test: the times are not the GPU's,
# and nothing is judged on them.
SHARED_GPU = "COMMBENCH_SHARED_GPU"
SHARED_NCCL_ENV = {"NCCL_NET": "Socket", "NCCL_SOCKET_IFNAME": "lo", "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}


def shared_gpu() -> bool:
    """Whether the shared-GPU functional test is on (COMMBENCH_SHARED_GPU=1)."""
    return os.environ.get(SHARED_GPU) == "1"


def gpus_on_host() -> list[str]:
    """The GPUs' device files on this host, whether or not CUDA can use them."""
    return sorted(glob.glob(DEVICE_FILES))


def driver_loads() -> bool:
    """Whether the CUDA driver's library loads in this process. Asked before commbench._cuda, which
    imports torch (seconds of a start on a host without GPUs). A commbench._cuda already imported (or a
    stand-in for it) answers for itself."""
    if "commbench._cuda" in sys.modules or os.environ.get(EMULATION):
        return True
    try:
        ctypes.CDLL(DRIVER_LIBRARY)
    except OSError:
        return False
    return True


def visible_gpus() -> tuple[int, str]:
    """(number of visible CUDA devices, why zero when it is)."""
    if not driver_loads():
        return 0, f"no NVIDIA driver on this host ({DRIVER_LIBRARY} does not load)"
    mod, why = _load()
    if mod is None:
        return 0, why
    try:
        n = mod.device_count()
    except RuntimeError as e:  # the runtime's own words: e.g. a driver too old for this CUDA
        remedy = (" (remedy: a torch built for the driver's CUDA, e.g. `make install TORCH_CUDA=cu128`; "
                  "nvidia-smi names the newest CUDA the driver supports)"
                  if "insufficient" in str(e) and "no NVIDIA driver" not in str(e) else "")
        return 0, f"CUDA cannot use the GPUs: {e}{remedy}"
    if n == 0:
        cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
        hint = f"CUDA_VISIBLE_DEVICES={cvd!r}" if cvd is not None else "no GPU on this host"
        return 0, f"no CUDA device visible ({hint})"
    return n, ""


def require_gpu(what: str) -> int:
    """The number of visible GPUs, or a CommbenchError that says why `what` cannot run."""
    n, why = visible_gpus()
    if n == 0:
        raise NodeError(f"{what} needs a GPU: {why}")
    return n


def choose_device(local_rank: int, visible: int) -> int:
    """The ordinal a rank uses among the GPUs it sees. With every GPU of the host visible to every
    rank, local rank i takes GPU i. With per-rank binding (Slurm --gpus-per-task, --gpu-bind, or a
    wrapper setting CUDA_VISIBLE_DEVICES per rank) each rank sees only its own GPUs, in blocks of
    `visible` consecutive local ranks, and takes ordinal local_rank mod visible of them. Which
    physical GPU that is, is checked across ranks by duplicate_gpus."""
    return local_rank % visible


def duplicate_gpus(identities: list[tuple[str, str, str]]) -> Optional[str]:
    """identities[rank] = (host, GPU UUID, PCI bus id). Why the layout is refused when two ranks of
    one host hold the same physical GPU, else None."""
    owner: dict[tuple[str, str], int] = {}
    for rank, (host, uuid, bus) in enumerate(identities):
        first = owner.setdefault((host, uuid), rank)
        if first != rank:
            return (f"ranks {first} and {rank} on host {host} both use GPU {uuid} (PCI {bus}): two ranks on one GPU "
                    f"measure contention, not the fabric; give each rank its own GPU (one rank per GPU, or "
                    f"--gpus-per-task=1 / a distinct CUDA_VISIBLE_DEVICES per rank)")
    return None


def printed_uuid(uuid: str, env: Optional[dict] = None) -> str:
    """A device's UUID as nvidia-smi -L prints it. CUDA gives a MIG instance's UUID in the same form as
    a GPU's; the instances a process sees are the ones CUDA_VISIBLE_DEVICES names as MIG-..., and they
    print as such."""
    visible = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES", "")
    if uuid.startswith("GPU-") and any(item.strip().startswith("MIG-") for item in visible.split(",")):
        return "MIG-" + uuid[len("GPU-"):]
    return uuid


def rank_device(world) -> int:
    """This rank's GPU ordinal, once every rank's choice is known to be a GPU of its own. Every rank
    reports into one gather, its failure included, so that no rank is left waiting for another that
    gave up."""
    n, why = visible_gpus()
    device, mine = None, f"--device cuda needs a GPU: {why}"
    if n:
        device = choose_device(world.local_rank, n)
        try:
            uuid, bus = cuda_module().device_identity(device)
            mine = (world.hosts[world.rank], printed_uuid(uuid), bus)
        except RuntimeError as e:
            mine = f"cannot query GPU {device}: {e}"
    entries = world.gather(mine)
    problem = None
    if world.rank == 0:
        failed = [(rank, e) for rank, e in enumerate(entries) if isinstance(e, str)]
        if failed:
            rank, text = failed[0]
            problem = text if world.size == 1 else f"rank {rank}: {text}"
        elif not shared_gpu():
            problem = duplicate_gpus(entries)
    problem = world.bcast(problem)
    if problem:
        raise CommbenchError(problem)
    if shared_gpu():
        # Before NCCL reads its environment (the unique id, the communicator's initialisation).
        os.environ.update(SHARED_NCCL_ENV, NCCL_HOSTID=f"commbench-shared-{world.hosts[world.rank]}-rank{world.rank}")
    return device


def host_gpu_count() -> int:
    """The GPUs of this host, whichever of them this process may see: the emulated ones, or the NVIDIA
    driver's device files (which CUDA_VISIBLE_DEVICES and device cgroups leave in place)."""
    if os.environ.get(EMULATION):
        return int(os.environ[EMULATION])
    return len(gpus_on_host())


def binding_warning(seen: list[int], on_host: list[int], hosts: list[str]) -> Optional[str]:
    """seen[rank]: the GPUs a rank sees; on_host[rank]: its host's GPUs; hosts[rank]: its host. When
    every rank sees one GPU of a multi-GPU host (--gpus-per-task=1, a per-rank CUDA_VISIBLE_DEVICES)
    and a host has several of the ranks, NCCL cannot reach those ranks' GPUs directly and may fall
    back from NVLink or PCIe P2P to shared memory or the network: what it then measures is not the
    node's fabric. One rank per host has no peer on its host to reach."""
    if len(set(hosts)) == len(hosts) or any(n != 1 for n in seen) or max(on_host) < 2:
        return None
    return (f"every rank sees one GPU of a host with {max(on_host)}: NCCL may not reach the other ranks' GPUs "
            f"over NVLink or PCIe P2P and fall back to shared memory or the network; remedy: let every rank see "
            f"all GPUs of its node (e.g. srun --gpus-per-node=N --gpu-bind=none, no per-rank "
            f"CUDA_VISIBLE_DEVICES): commbench gives local rank i GPU i")


def gpu_layout(world, devices: Optional[list[int]] = None, binding: Optional[dict] = None) -> dict:
    """What a GPU run's header and result file say of its GPUs: every rank's (host, device, model,
    UUID), the library versions, whether the ranks share GPUs (shared_gpu), and a binding that may cost
    NCCL its direct paths (binding_warning). `devices`: the GPUs a command of one process drives itself
    (copy, the peer matrix), listed instead of the one its rank took; `binding`: the CPUs the rank
    runs on beside its GPU's (affinity.bind_rank), and ranks away from theirs (cpu_binding_warning).
    Collective."""
    take_gpu(world)
    mod = cuda_module()
    mine = [{"rank": world.rank, "host": world.hosts[world.rank], "device": d, "name": mod.device_name(d),
             "uuid": printed_uuid(mod.device_identity(d)[0]), "memory_gbps": float(f"{mod.memory_bandwidth(d) / 1e9:.4g}")}
            for d in (devices or [world.device])]
    if binding is not None:
        mine[0].update(cpus=binding["cpus"], gpu_cpus=binding["gpu_local_cpus"], local=binding["local"])
    ranks = world.gather({"gpus": mine, "seen": visible_gpus()[0], "on_host": host_gpu_count()})
    if world.rank != 0:
        return {}
    gpus = [g for r in ranks for g in r["gpus"]]
    warning = binding_warning([r["seen"] for r in ranks], [r["on_host"] for r in ranks], world.hosts)
    cpu_warning = cpu_binding_warning(gpus)
    return {"gpus": gpus, "cuda_versions": mod.versions(), "shared_gpu": shared_gpu(),
            **({"binding_warning": warning} if warning else {}),
            **({"cpu_binding_warning": cpu_warning} if cpu_warning else {})}


def take_gpu(world) -> int:
    """This rank's GPU (rank_device), chosen once per world and kept in world.device."""
    if world.device is None:
        world.device = rank_device(world)
    return world.device


def cpu_binding_warning(ranks: list[dict]) -> Optional[str]:
    """ranks: each rank's gpus entry (rank, host, device, cpus, gpu_cpus, local). The ranks whose CPUs
    none of their GPU's local CPUs are among."""
    away = [r for r in ranks if r.get("local") is False]
    if not away:
        return None
    r = away[0]
    return (f"{len(away)} rank(s) run on CPUs away from their GPU, e.g. rank {r['rank']} ({r['host']}) on CPUs "
            f"{r['cpus']}, none local to its GPU {r['device']} (CPUs {r['gpu_cpus']}): NCCL's threads and the host's "
            f"side of each call cross between the CPU sockets; remedy: bind each rank to its GPU's CPUs (mpirun "
            f"--bind-to none lets commbench do it; srun --cpu-bind=... per GPU), or run standalone, which binds")


# NCCL's device memory per communicator, from its sources (2.28; MAXCHANNELS 64 since 2.25, 32 before):
# a connection of a channel to a peer is a receive side holding all three protocols' buffers (LL 512 KiB,
# LL128 4.6875 MiB, Simple NCCL_BUFFSIZE, 4 MiB by default) and a send side, each rounded up to the 2 MiB
# granularity of CUDA's IPC memory (transport/p2p.cc); every channel NCCL sets up holds tables of 3 x 2
# MiB, each NVLS channel one more (channel.cc); NVLS (NVLink SHARP, on NVSwitch) 16 channels of 2 x 8
# steps of NCCL_NVLS_CHUNKSIZE (128 KiB) per GPU of the node (transport/nvls.cc).
# Point-to-point across nodes (2.29-2.30, graph/paths.cc ncclTopoComputeP2pChannels): every peer gets one
# channel count, NCCL_NCHANNELS_PER_NET_PEER where set, else what a NIC needs at 14 GB/s a channel (4 for
# one 400G NIC a GPU), halved while it times the node count exceeds the p2p channels: 4 up to 8 nodes,
# 2 at 16, 1 from 32 (at 32 p2p channels). NET connections of point-to-point calls share pools
# (transport/net.cc sharedNetBuffersInit): per direction p2p channels x 16 slots of 128 KiB, the receive
# pool on the rank's GPU, the send pools of up to every local rank on it (PXN proxies), whatever the
# count of peers.
_MIB = 1 << 20
_GRANULE = 2 * _MIB
_LL, _LL128 = 512 * 1024, 4 * _MIB + 704 * 1024
MAX_CHANNELS = 64
_DEFAULT_CHANNELS = 32  # a bound of what NCCL chooses on current NVLink systems (24 on an 8-GPU H100)
_NVLS_CHANNELS, _NVLS_STEP_BYTES = 16, 8 * 128 * 1024
_NET_CHANNELS_PER_PEER = 4  # ceil(48 GB/s / 14 GB/s): NCCL_P2P_PER_CHANNEL_NET_BW for one 400G NIC a GPU
_NET_SLOTS, _P2P_CHUNK = 16, 128 * 1024


def _pow2_up(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _env_number(env: dict, name: str, default: int) -> int:
    try:
        return int(env.get(name, ""), 0)  # NCCL reads these as C integers: decimal or 0x hex
    except ValueError:
        return default


def p2p_channels_per_peer(nodes: int, p2p_channels: int, env: Optional[dict] = None) -> int:
    """The channels NCCL gives each point-to-point peer of a communicator over `nodes` nodes with
    `p2p_channels` p2p channels (NCCL 2.29-2.30): all of them on one node, across nodes the count the
    module's notes derive."""
    env = os.environ if env is None else env
    if nodes <= 1:
        return p2p_channels
    given = _env_number(env, "NCCL_NCHANNELS_PER_NET_PEER", 0)
    if given > 0:
        return min(p2p_channels, _pow2_up(given))
    per_peer = _NET_CHANNELS_PER_PEER
    while per_peer > 1 and per_peer * nodes > p2p_channels:
        per_peer //= 2
    return per_peer


def nccl_reserve_bytes(ranks: int, local_ranks: int, p2p_peers: int, env: Optional[dict] = None) -> int:
    """Device memory NCCL allocates outside commbench's buffers, a bound for the up-front memory check:
    `ranks` in the communicator, `local_ranks` of them on this node (NVLS spans the node's GPUs),
    `p2p_peers` that this rank's point-to-point calls reach (all-to-all and commbench's algorithms:
    NCCL connects every one), those of this node first. Every channel's tables, a ring and a tree's
    connections (up to three peers a channel on one node), each peer's point-to-point channels on this
    node, the shared pools of point-to-point calls across nodes, NVLS unless NCCL_NVLS_ENABLE=0;
    NCCL_BUFFSIZE and NCCL_MAX_NCHANNELS (or NCCL_MAX_CTAS) as NCCL reads them."""
    env = os.environ if env is None else env

    def granules(n: int) -> int:
        return -(-n // _GRANULE) * _GRANULE
    buffsize = max(_env_number(env, "NCCL_BUFFSIZE", 4 * _MIB), 0)
    channels = _env_number(env, "NCCL_MAX_NCHANNELS", _env_number(env, "NCCL_MAX_CTAS", _DEFAULT_CHANNELS))
    channels = max(min(channels, MAX_CHANNELS), 1)
    p2p_channels = min(_pow2_up(channels), MAX_CHANNELS)
    connection = granules(_LL + _LL128 + buffsize + 4096) + _GRANULE  # receive side (with its header), send side
    tables = (max(channels, p2p_channels) * 3 + _NVLS_CHANNELS) * _GRANULE
    collectives = channels * connection * (1 if ranks <= 2 else 3) if ranks > 1 else 0
    nodes = -(-ranks // max(local_ranks, 1))
    local_peers = min(p2p_peers, local_ranks - 1)
    p2p = local_peers * p2p_channels_per_peer(nodes, p2p_channels, env) * connection
    if p2p_peers > local_peers:
        p2p += (local_ranks + 1) * p2p_channels * _NET_SLOTS * _P2P_CHUNK
    nvls = 0
    if local_ranks > 1 and env.get("NCCL_NVLS_ENABLE", "") != "0":
        nvls = _NVLS_CHANNELS * 2 * _NVLS_STEP_BYTES * local_ranks + _GRANULE
    return tables + collectives + p2p + nvls


# NCCL variables that override what commbench chooses for each communicator (NCCL's envConfigOverride):
# a blocking one cannot be made against --timeout, a non-blocking one runs each call's group on a
# thread of its own (its time in a loop's), and shared resources share one abort between them all.
MODE_OVERRIDES = ("NCCL_COMM_BLOCKING", "NCCL_COMM_SPLIT_SHARE_RESOURCES")


def refuse_mode_overrides(env: Optional[dict] = None) -> None:
    env = os.environ if env is None else env
    for name in MODE_OVERRIDES:
        if env.get(name, "") != "":
            raise CommbenchError(f"{name}={env[name]} is set: commbench chooses each NCCL communicator's mode itself "
                                 f"(non-blocking to make it within --timeout, blocking to time its calls, "
                                 f"resources of its own); unset {name}")


def device_comm(world, device: int, timeout_s: float):
    """A NCCL communicator over all ranks: rank 0 makes the unique id and broadcasts it."""
    refuse_mode_overrides()
    mod = cuda_module()
    uid = world.root_call(mod.nccl_unique_id)
    return mod.DeviceComm(uid, world.rank, world.size, device, timeout_s, splits=world.subsets)
