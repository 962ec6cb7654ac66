"""What the result file records about the machine and the environment."""

from __future__ import annotations

import os
import platform
import subprocess
from functools import lru_cache
from typing import Optional

import torch

from . import __version__

# Variables that change how communication libraries behave. Only these are recorded: the full
# environment can hold secrets.
ENV_PREFIXES = ("NCCL_", "UCX_", "OMPI_", "MPICH_", "I_MPI_", "CUDA_", "TORCH_", "GLOO_")


def recorded_env(env: Optional[dict] = None) -> dict[str, str]:
    env = os.environ if env is None else env
    return {k: v for k, v in sorted(env.items()) if k.startswith(ENV_PREFIXES)}


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
    """The commit of the checkout commbench runs from, when it runs from one."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def mpi_version() -> Optional[str]:
    try:
        from . import _host
    except ImportError:
        return None
    # First line only, without Open MPI's build details ("Open MPI v5.0.11, package: ...").
    return _host.mpi_library_version().strip().split("\n")[0].split(", package:")[0].rstrip(", ")


def describe(hosts: list[str], ranks: int, launcher: str) -> dict:
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
