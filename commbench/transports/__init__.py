"""The registry of transports: who moves the data (MPI, NCCL, gloo), which impls each offers for
which collective on which device, and how one of them is timed. An impl is either the transport's
library call (named after the transport) or one of our algorithms (collectives/*.py) run over the
transport's point-to-point calls."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from ..errors import CommbenchError
from .gloo import GLOO
from .mpi import MPI
from .nccl import NCCL

TRANSPORTS = (MPI, NCCL, GLOO)


class Pair(Protocol):
    """One rank's side of a rank pair on a transport, made by the transport's open_pairs(world, pairs,
    window), which is collective over the world and gives None to a rank in no pair."""
    first: bool  # this rank sends first
    device: str  # where the pair's buffers live: 'cpu' or 'cuda:N'

    def times(self, test: str, send, recv, size: int, iters: int) -> np.ndarray:
        """Seconds per message of `iters` iterations of `test` (pingpong: one way; bandwidth: a
        window's time over its messages), the same samples on both ranks of the pair."""

    def close(self) -> None:
        """Frees what the pair holds of its own (MPI's two-rank communicator)."""


def transport_names() -> list[str]:
    return [t.name for t in TRANSPORTS]


def transport(name: str):
    """The transport of a name (p2p's and links' --impl)."""
    for t in TRANSPORTS:
        if t.name == name:
            return t
    raise CommbenchError(f"unknown transport '{name}': choose from {', '.join(transport_names())}")


def default_p2p_transport(launcher) -> str:
    """p2p without --impl: MPI, or gloo under torchrun, which starts no MPI."""
    return GLOO.name if launcher == "torchrun" else MPI.name


class Impl:
    """One way to run a collective: a transport and an impl name it answers to."""

    def __init__(self, transport, name: str, description: str):
        self.transport, self.name, self.description = transport, name, description

    def prepare(self, world, cfg) -> None:
        self.transport.prepare(world, cfg, f"--impl {self.transport.name}")

    def rank_times(self, world, coll, send, recv, op: int, iters: int, cfg, agg: int = 1,
                   delayed: bool = False) -> np.ndarray:
        """Every rank's own seconds per call, ranks x iterations (of `agg` calls fused as the
        transport allows), on every rank; `delayed`: with cfg's --delay (RunConfig.delay_for)."""
        own = self.transport.times(world, coll, self.name, send, recv, op, iters, cfg, agg,
                                   cfg.delay_for(world.rank) if delayed else 0.0)
        return world.all_times(own)

    def times(self, world, coll, send, recv, op: int, iters: int, cfg, agg: int = 1) -> np.ndarray:
        """Seconds per call of the slowest rank, which sets the pace; never delayed."""
        return self.rank_times(world, coll, send, recv, op, iters, cfg, agg).max(axis=0)


def impls_for(coll, device: str) -> dict[str, Impl]:
    """Every impl of `coll` on `device`, by name, library calls first."""
    found: dict[str, Impl] = {}
    for t in TRANSPORTS:
        for name, description in t.impls(coll, device).items():
            found.setdefault(name, Impl(t, name, description))
    return found


def default_impls(coll, device: str, launcher) -> list[str]:
    """What runs without --impl: everything on the CPU (only gloo under torchrun, which has no MPI);
    NCCL's call and our algorithms on GPUs."""
    known = impls_for(coll, device)
    if device == "cpu":
        return ["gloo"] if launcher == "torchrun" and "gloo" in known else list(known)
    return [n for n, i in known.items() if i.transport is NCCL]


def parse_impls(text: str, coll, device: str) -> list[Impl]:
    known = impls_for(coll, device)
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise CommbenchError(f"empty --impl: choose from {', '.join(known)}")
    for n in names:
        if n in known:
            continue
        other = "cuda" if device == "cpu" else "cpu"
        if n in impls_for(coll, other):
            raise CommbenchError(f"impl '{n}' of {coll.name} runs with --device {other}, not --device {device}")
        everywhere = sorted(set(known) | set(impls_for(coll, other)))
        raise CommbenchError(f"unknown impl '{n}' for {coll.name}: choose from {', '.join(everywhere)}")
    return [known[n] for n in dict.fromkeys(names)]
