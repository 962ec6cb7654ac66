"""Implementations a sweep can time, by name. Each one returns per-iteration seconds, already the
maximum over ranks; the sweep owns everything else (data, checks, statistics)."""

from __future__ import annotations

from ..errors import CommbenchError
from .gloo import GlooAllreduce
from .native import NativeAllreduce

ALLREDUCE_IMPLS = {
    "mpi": NativeAllreduce("mpi", "the MPI library's MPI_Allreduce"),
    "ring": NativeAllreduce("ring", "commbench ring (reduce-scatter + all-gather) over MPI point-to-point"),
    "tree": NativeAllreduce("tree", "commbench pipelined binary tree (reduce + broadcast) over MPI point-to-point"),
    "gloo": GlooAllreduce(),
}


def parse_impls(text: str, known: dict) -> list:
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise CommbenchError(f"empty --impl: choose from {', '.join(known)}")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise CommbenchError(f"unknown impl '{unknown[0]}': choose from {', '.join(known)}")
    return [known[n] for n in dict.fromkeys(names)]
