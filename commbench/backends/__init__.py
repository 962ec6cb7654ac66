"""Implementations a sweep can time, by device and name. Each returns per-iteration seconds, already
the maximum over ranks; the sweep owns everything else (data, checks, statistics)."""

from __future__ import annotations

from ..errors import CommbenchError
from .device import DeviceAllreduce
from .gloo import GlooAllreduce
from .native import NativeAllreduce

ALLREDUCE_IMPLS = {
    "cpu": {
        "mpi": NativeAllreduce("mpi", "the MPI library's MPI_Allreduce"),
        "ring": NativeAllreduce("ring", "commbench ring (reduce-scatter + all-gather) over MPI point-to-point"),
        "tree": NativeAllreduce("tree", "commbench pipelined binary tree (reduce + broadcast) over MPI point-to-point"),
        "gloo": GlooAllreduce(),
    },
    "cuda": {
        "nccl": DeviceAllreduce("nccl", "NCCL ncclAllReduce"),
        "ring": DeviceAllreduce("ring", "commbench ring over NCCL send/recv, reduction kernel"),
        "tree": DeviceAllreduce("tree", "commbench binary tree over NCCL send/recv, reduction kernel"),
        "mpi": NativeAllreduce("mpi", "the MPI library's MPI_Allreduce on GPU buffers (CUDA-aware MPI)"),
    },
}

DEFAULT_IMPLS = {"cpu": "mpi,ring,tree,gloo", "cuda": "nccl,ring,tree"}


def parse_impls(text: str, device: str) -> list:
    known = ALLREDUCE_IMPLS[device]
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise CommbenchError(f"empty --impl: choose from {', '.join(known)}")
    for n in names:
        if n in known:
            continue
        other = "cuda" if device == "cpu" else "cpu"
        if n in ALLREDUCE_IMPLS[other]:
            raise CommbenchError(f"impl '{n}' runs with --device {other}, not --device {device}")
        all_names = sorted(set(ALLREDUCE_IMPLS["cpu"]) | set(ALLREDUCE_IMPLS["cuda"]))
        raise CommbenchError(f"unknown impl '{n}': choose from {', '.join(all_names)}")
    return [known[n] for n in dict.fromkeys(names)]
