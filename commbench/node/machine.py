"""What the result file records about the machine and the environment."""

from __future__ import annotations

import os
import platform
import subprocess
from functools import lru_cache
from typing import Callable, Optional

from .. import __version__
from ..redact import scrub, secret_name

# The settings that change how the communication libraries and the GPUs perform: the only
# variables a result file records, because result files go into shared repositories and the full
# environment holds credentials, user names and paths. Library families by prefix (Open MPI's by
# its MCA parameters only: its other OMPI_ variables describe the launch), single settings by name.
RECORDED_PREFIXES = ("NCCL_", "UCX_", "OMPI_MCA_", "MPICH_", "I_MPI_", "FI_", "TORCH_NCCL_", "GLOO_")
RECORDED_NAMES = frozenset({"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_DEVICE_MAX_CONNECTIONS",
                            "CUDA_LAUNCH_BLOCKING", "CUDA_MODULE_LOADING", "OMP_NUM_THREADS",
                            "TORCH_DISTRIBUTED_DEBUG"})
# MCA variables mpirun itself sets on every rank it starts (the launch, and paths of the machine it
# ran on), not tuning a user chose.
LAUNCHER_SET = frozenset({"OMPI_MCA_PREFIXES", "OMPI_MCA_initial_wdir", "OMPI_MCA_num_procs", "OMPI_MCA_cpu_type"})
# A name with one of these endings, or an absolute path as its value, is a path of the machine the
# run was on (NCCL_TOPO_FILE, UCX_..._DIR, a plugin's location): it means nothing on another machine
# and shows how this one is laid out.
PATH_SUFFIXES = ("_ROOT", "_PATH", "_DIR", "_HOME", "_FILE", "_PREFIX")


def _setting(name: str) -> bool:
    return (name in RECORDED_NAMES or name.startswith(RECORDED_PREFIXES)) and name not in LAUNCHER_SET


def _path(name: str, value: str) -> bool:
    return name.upper().endswith(PATH_SUFFIXES) or os.path.isabs(value)


def recorded_env(env: Optional[dict] = None) -> dict[str, str]:
    """The performance settings of env (default: this process's environment) that a result file
    keeps; also what cleans the environment of a result file written before this list existed."""
    env = os.environ if env is None else env
    return {k: scrub(v) for k, v in sorted(env.items()) if _setting(k) and not secret_name(k) and not _path(k, v)}


def typed_command(argv: list[str]) -> list[str]:
    """The command as its user typed it: `commbench allreduce ...`, whether this process runs as the
    console script, as `python -m commbench` or as a rank the standalone parent re-ran."""
    return ["commbench", *argv[1:]]


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def meminfo_bytes(field: str) -> int:
    """A /proc/meminfo field in bytes (0 when unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def cores() -> int:
    """Logical CPUs of the node (not this process's affinity, which a launcher may have narrowed)."""
    return os.cpu_count() or 1


@lru_cache(maxsize=1)
def git_commit() -> Optional[str]:
    """The commit of commbench's own checkout, when it runs from one."""
    return checkout_commit(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def checkout_commit(package: str) -> Optional[str]:
    """The commit of the checkout whose top folder holds the package folder `package`; None where the
    package lies elsewhere in a repository (a fleet repository that vendors commbench has commits of
    its own, which are not commbench's) or in none."""
    try:
        out = subprocess.run(["git", "-C", package, "rev-parse", "--show-toplevel", "HEAD"], capture_output=True,
                             text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.split()
    if out.returncode != 0 or len(lines) != 2 or not os.path.samefile(lines[0], os.path.dirname(package)):
        return None
    return lines[1]


def mpi_version() -> Optional[str]:
    try:
        from .. import _host
    except ImportError:
        return None
    # First line only, without Open MPI's build details ("Open MPI v5.0.11, package: ...").
    return _host.mpi_library_version().strip().split("\n")[0].split(", package:")[0].rstrip(", ")


def torch_version():
    """torch's version module (__version__, cuda), read from torch/version.py without importing torch:
    that costs seconds and hundreds of MB, which a rank on host memory never pays (run/buffers.py)."""
    import importlib.util
    spec = importlib.util.find_spec("torch")
    path = os.path.join(list(spec.submodule_search_locations)[0], "version.py")
    module = importlib.util.module_from_spec(importlib.util.spec_from_file_location("commbench_torch_version", path))
    module.__spec__.loader.exec_module(module)
    return module


def describe(hosts: list[str], ranks: int, launcher: str) -> dict:
    torch = torch_version()
    return {
        "hosts": list(dict.fromkeys(hosts)),
        "ranks": ranks,
        "launcher": launcher,
        "cpu_model": cpu_model(),
        "cores": cores(),
        "memory_bytes": meminfo_bytes("MemTotal"),
        "os": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "mpi": mpi_version(),
    }


def tool_info() -> dict:
    return {"name": "commbench", "version": __version__, "git_commit": git_commit()}


# Where a launch pins a rank to one network device, in the order the libraries read them: UCX's
# device (mlx5_1:1), NCCL's InfiniBand HCA and socket interface, Open MPI's TCP interface.
NIC_VARIABLES = ("UCX_NET_DEVICES", "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "OMPI_MCA_btl_tcp_if_include")
# NCCL's two lists match by prefix (mlx5_1 takes mlx5_10 too) unless '=' leads them (misc/utils.cc's
# matchIfList); the devices they are matched against, by variable.
_PREFIXED = {"NCCL_IB_HCA": "/sys/class/infiniband", "NCCL_SOCKET_IFNAME": "/sys/class/net"}


def pinned_nic(env: Optional[dict] = None, devices: Optional[Callable[[str], list[str]]] = None) -> Optional[str]:
    """The one NIC this rank's environment pins it to (a rail-per-rank launch sets one per local
    rank), or None where none is named alone: a list, an exclusion (^), a subnet, or one of NCCL's
    prefixes that matches no device or several of this host's (`devices(folder)`: the names in a
    /sys/class folder). NCCL reads NCCL_SOCKET_IFNAME of one character as unset."""
    env = os.environ if env is None else env
    devices = devices or _listed
    for name in NIC_VARIABLES:
        value = env.get(name, "").strip()
        if name == "NCCL_SOCKET_IFNAME" and len(value) <= 1:
            continue
        if not value or any(c in value for c in ",^/ ") or value[0].isdigit():
            continue
        exact = value.startswith("=")
        device = value.lstrip("=").split(":")[0]
        if "=" in device or not device:
            continue
        if name in _PREFIXED and not exact:
            matches = [d for d in devices(_PREFIXED[name]) if d.startswith(device)]
            if len(matches) != 1:
                continue
            device = matches[0]
        return device
    return None


def _listed(folder: str) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []
