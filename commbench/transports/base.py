"""What every transport provides (Transport) and what one side of a rank pair on it does (Pair). A
transport subclasses Transport: the calls its library has no answer for (the choice a call made, a
forced variant's refusal) keep the defaults here, stated once."""

from __future__ import annotations

import contextlib
from typing import ContextManager, Optional, Protocol

import numpy as np


class Pair(Protocol):
    """One rank's side of a rank pair on a transport, made by the transport's open_pairs(world, pairs,
    window), which every rank calls and which gives None to a rank in no pair. The pairs share the
    world's communicator: none is made per round."""
    first: bool  # this rank sends first
    device: str  # where the pair's buffers live: 'cpu' or 'cuda:N'

    def times(self, test: str, send, recv, size: int, iters: int, loop: int = 1) -> np.ndarray:
        """Seconds per iteration of `iters` samples of `test` (pingpong: one way; bandwidth: the
        whole window of messages), the same samples on both ranks of the pair; a sample is `loop`
        iterations back to back between two timestamps (the loop timing), its figure per iteration."""

    def close(self) -> None:
        """Frees what the pair holds of its own, if anything."""


class Transport(Protocol):
    """Who moves the data: its name (an impl's `@name`), the device its pairs' buffers live on, a line
    for the p2p command's help, and whether --graph can capture its calls."""
    name: str
    p2p_device: str
    p2p_summary: str
    captures_graphs: bool
    # Whether `overlap` can start its library's call and compute before waiting for it (overlap_times).
    overlaps: bool = False

    def impls(self, coll, device: str) -> dict[Optional[str], str]:
        """Our algorithm (None: the library's call) -> what it is, for `coll` on `device`."""

    def prepare(self, world, cfg, what: str) -> None:
        """On every rank before the first call (a communicator, a process group); `what`: the option or
        command a refusal names."""

    def times(self, world, coll, algorithm: Optional[str], send, recv, op: int, iters: int, cfg, agg: int,
              delay_s: float, loop: int = 1, gated: bool = True) -> np.ndarray:
        """This rank's own seconds per call (Impl.rank_times says the arguments)."""

    def overlap_times(self, world, coll, send, recv, op: int, iters: int, cfg, sweeps: int, probes: int):
        """Where `overlaps`: this rank's per-iteration times of the library's non-blocking call beside
        `sweeps` of the computation, `probes` tests of it among them (commbench._host.OverlapTimes)."""

    def open_pairs(self, world, pairs, window: int) -> Optional[Pair]:
        """This rank's side of its pair among `pairs`, or None."""

    def library_choice(self, coll, send_bytes: int, recv_bytes: int) -> Optional[dict]:
        """What the library chose for its call on buffers of these bytes, as it reports it; a library
        that reports nothing (MPI, gloo): None."""
        return None

    def choice_reported(self) -> ContextManager:
        """The scope in which the library reports its choice (a size's untimed check); nothing to open
        where it reports none."""
        return contextlib.nullcontext()

    def refusal(self, error: Exception) -> Optional[str]:
        """Where `error` is the library refusing a forced variant, what it said; None otherwise."""
        return None
