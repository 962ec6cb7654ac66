"""GPU availability, device selection and device-side data, shared by every GPU command.

Everything here answers "can this request run on a GPU, and on which one?" with one clear line
when the answer is no, before any rank is spawned or any buffer allocated.
"""

from __future__ import annotations

import os
from .errors import CommbenchError


def cuda_module():
    """commbench._cuda, or None when it was not built."""
    try:
        from . import _cuda
    except ImportError:
        return None
    return _cuda


def visible_gpus() -> tuple[int, str]:
    """(number of visible CUDA devices, why zero when it is)."""
    mod = cuda_module()
    if mod is None:
        return 0, ("commbench._cuda is not built (no CUDA toolkit or a CPU build of torch when it was "
                   "installed; see 'commbench version -v')")
    n = mod.device_count()
    if n == 0:
        cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
        hint = f"CUDA_VISIBLE_DEVICES={cvd!r}" if cvd is not None else "no driver or no GPU on this host"
        return 0, f"no CUDA device visible ({hint})"
    return n, ""


def require_gpu(what: str) -> int:
    """The number of visible GPUs, or a CommbenchError that says why `what` cannot run."""
    n, why = visible_gpus()
    if n == 0:
        raise CommbenchError(f"{what} needs a GPU: {why}")
    return n


def rank_device(local_rank: int, local_size: int) -> int:
    """One rank per GPU: local rank i uses device i. Two ranks on one GPU would measure contention,
    not the fabric, so that is refused."""
    n = require_gpu("--device cuda")
    if local_size > n:
        raise CommbenchError(f"{local_size} ranks on this host but {n} visible GPU(s): two ranks would share a "
                             f"GPU; launch at most {n} ranks per host (--np {n})")
    return local_rank


def device_comm(world, device: int):
    """A NCCL communicator over all ranks: rank 0 makes the unique id and broadcasts it."""
    mod = cuda_module()
    uid = world.root_call(mod.nccl_unique_id)
    return mod.DeviceComm(uid, world.rank, world.size, device)
