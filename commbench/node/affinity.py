"""Host memory beside a GPU. The kernel places pinned and pageable host buffers on the NUMA node of
the CPU that allocates or first touches them, so a host<->device copy measured from a CPU of the
other socket also crosses the link between the sockets: a slower figure that says nothing of the
GPU's own PCIe link. As NCCL does before it allocates host memory, the copies run on the CPUs that
NVML lists as local to the GPU, within those this process was allowed (a user's binding stands)."""

from __future__ import annotations

import contextlib
import os
from typing import Iterator, Optional

from .topo import Nvml, cpulist_to_set, set_to_cpulist


def _cpu_ids() -> int:
    """How many CPU ids the host may have (one above the highest): NVML fills a mask of the size it
    is given, and ids run past the count of CPUs online where some are offline."""
    try:
        with open("/sys/devices/system/cpu/possible") as f:
            return max(cpulist_to_set(f.read().strip())) + 1
    except (OSError, ValueError):
        return max(os.cpu_count() or 1, max(os.sched_getaffinity(0)) + 1)


def gpu_cpus(device: int) -> tuple[set[int], str]:
    """The CPUs local to CUDA device `device`, or none and why NVML cannot say. Found by PCI bus id:
    CUDA's ordinals are not NVML's."""
    from .gpu import cuda_module
    _, bus = cuda_module().device_identity(device)
    try:
        nvml = Nvml()
    except Exception as e:  # noqa: BLE001 - ImportError, NVMLError_LibraryNotFound, _DriverNotLoaded, ...
        return set(), f"NVML unavailable: {e}"
    try:
        cpus = nvml.cpus(nvml.handle_by_bus(bus.encode()), _cpu_ids())  # bytes: what every pynvml takes
        return cpus, "" if cpus else "NVML gives the GPU no CPU affinity"
    except nvml.nv.NVMLError as e:
        return set(), f"NVML cannot say: {e}"
    finally:
        nvml.close()


def onto_gpu_cpus(device: int, move: bool = True) -> dict:
    """With `move`, this thread onto the allowed CPUs local to GPU `device` (the threads it starts
    later inherit them; a user's binding stands where none of them is allowed); then where it runs:
    its CPUs, the GPU's local CPUs (None: unknown, and why) and whether they meet (None: unknown)."""
    allowed = os.sched_getaffinity(0)
    local, why = gpu_cpus(device)
    chosen = allowed & local
    if move and chosen and chosen != allowed:
        os.sched_setaffinity(0, chosen)
    return {"cpus": set_to_cpulist(os.sched_getaffinity(0)), "gpu_local_cpus": set_to_cpulist(local) if local else None,
            "local": bool(chosen) if local else None, **({"unknown": why} if why else {})}


_bound: Optional[dict] = None  # this rank's binding, once made (bind_rank)


def _left_unbound() -> bool:
    """Whether this rank's launcher left its CPUs as they were: the rank may run wherever its parent
    (Open MPI's daemon, torchrun's agent) may, as under `mpirun --bind-to none`. A launcher that binds
    (Open MPI by default, `srun --cpu-bind`) narrows the rank's CPUs after it forks."""
    try:
        return os.sched_getaffinity(0) == os.sched_getaffinity(os.getppid())
    except OSError:  # the parent gone, or not ours to ask
        return False


def bind_rank(world) -> dict:
    """This rank's GPU taken and the rank's CPUs beside its GPU's (onto_gpu_cpus), once a process: a
    rank of commbench's own launch, which mpirun leaves unbound, or one a user's launcher left unbound,
    moves onto its GPU's CPUs before CUDA and NCCL start their threads (which inherit them; NCCL logs an
    empty affinity otherwise); a binding a user's launcher made stands, and gpu_layout says where it
    misses the GPU."""
    global _bound
    from .gpu import take_gpu
    device = take_gpu(world)
    if _bound is None:
        _bound = onto_gpu_cpus(device, move=world.launcher == "standalone" or _left_unbound())
    return _bound


@contextlib.contextmanager
def near_gpu(device: int) -> Iterator[dict]:
    """Runs the block on the allowed CPUs local to GPU `device` (onto_gpu_cpus) and gives where its
    host memory lands. The affinity is restored after. A memory policy of the user's (numactl
    --membind, --interleave) places pages its own way: what the kernel does then is not seen here."""
    allowed = os.sched_getaffinity(0)
    try:
        yield onto_gpu_cpus(device)
    finally:
        os.sched_setaffinity(0, allowed)


def placement_line(device: int, placement: dict) -> tuple[str, bool]:
    """(what the header says of the host buffers, whether it is a warning)."""
    where = f"host buffers allocated from CPUs {placement['cpus']}"
    if placement["local"] is None:
        return f"{where}; which CPUs are local to cuda:{device} is unknown ({placement['unknown']})", False
    if placement["local"]:
        return f"{where}, local to cuda:{device}", False
    return (f"{where}, none of them local to cuda:{device} (its CPUs: {placement['gpu_local_cpus']}): the host "
            f"copies also cross the link between the CPU sockets; bind to the GPU's CPUs or not at all"), True
