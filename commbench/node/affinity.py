"""Host memory beside a GPU. The kernel places pinned and pageable host buffers on the NUMA node of
the CPU that allocates or first touches them, so a host<->device copy measured from a CPU of the
other socket also crosses the link between the sockets: a slower figure that says nothing of the
GPU's own PCIe link. As NCCL does before it allocates host memory, the copies run on the CPUs that
NVML lists as local to the GPU, within those this process was allowed (a user's binding stands)."""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

from .topo import Nvml, set_to_cpulist


def gpu_cpus(device: int) -> set[int]:
    """The CPUs local to CUDA device `device`; empty where NVML cannot say (no nvidia-ml-py, no
    driver, a GPU it does not list). Found by PCI bus id: CUDA's ordinals are not NVML's."""
    from .gpu import cuda_module
    _, bus = cuda_module().device_identity(device)
    try:
        nvml = Nvml()
    except Exception:  # noqa: BLE001 - ImportError, NVMLError_LibraryNotFound, _DriverNotLoaded, ...
        return set()
    try:
        return nvml.cpus(nvml.handle_by_bus(bus), os.cpu_count() or 1)
    except nvml.nv.NVMLError:
        return set()
    finally:
        nvml.close()


@contextlib.contextmanager
def near_gpu(device: int) -> Iterator[dict]:
    """Runs the block on the allowed CPUs local to GPU `device` (this thread's affinity, which the
    threads it starts inherit) and gives where its host memory lands: the CPUs it runs on, the GPU's
    local CPUs (None: unknown) and whether they meet (None: unknown). The affinity is restored after."""
    allowed = os.sched_getaffinity(0)
    local = gpu_cpus(device)
    chosen = allowed & local
    moved = bool(chosen) and chosen != allowed
    if moved:
        os.sched_setaffinity(0, chosen)
    try:
        yield {"cpus": set_to_cpulist(os.sched_getaffinity(0)), "gpu_local_cpus": set_to_cpulist(local) if local else None,
               "local": bool(chosen) if local else None}
    finally:
        if moved:
            os.sched_setaffinity(0, allowed)


def placement_line(device: int, placement: dict) -> tuple[str, bool]:
    """(what the header says of the host buffers, whether it is a warning)."""
    where = f"host buffers allocated from CPUs {placement['cpus']}"
    if placement["local"] is None:
        return f"{where}; which CPUs are local to cuda:{device} is unknown without NVML", False
    if placement["local"]:
        return f"{where}, local to cuda:{device}", False
    return (f"{where}, none of them local to cuda:{device} (its CPUs: {placement['gpu_local_cpus']}): the host "
            f"copies also cross the link between the CPU sockets; bind to the GPU's CPUs or not at all"), True
