"""Point-to-point: ping-pong latency and windowed bandwidth between pairs of ranks, each size checked
byte for byte before it is timed."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..launch import watchdog
from ..results.record import Record, measured
from ..sizes import format_size
from ..transports import transport
from .buffers import check_device_memory, page_aligned
from .config import RunConfig
from .policy import Policy, measure, measure_loop
from .preflight import p2p_bytes


def _byte_pattern(n: int) -> np.ndarray:
    return ((np.arange(n, dtype=np.int64) * 7 + 3) % 251).astype(np.uint8)


P2P_TESTS = {
    "pingpong": "ping-pong, one-way latency = round trip / 2",
    "bandwidth": "windowed unidirectional bandwidth, time per message",
}


class PairTimers:
    """Ping-pong and bandwidth of one rank pair, on this rank's side: the transport's pair (Pair) times
    the loops; here are the buffers, the exact check and the record. Each rank sends from one
    page-aligned buffer and receives into another, as OSU and nccl-tests do."""

    def __init__(self, link, a: int, b: int, window: int, nbytes: int):
        self.link, self.ranks, self.window, self.first = link, [a, b], window, link.first
        self.gpu = None if link.device == "cpu" else int(link.device.split(":")[1])
        self.send, self.recv = (page_aligned(max(nbytes, 1), self.gpu) for _ in range(2))

    def __call__(self, test: str, size: int, iters: int, loop: int = 1) -> np.ndarray:
        return self.link.times(test, self.send, self.recv, size, iters, loop)

    def wrong(self, size: int) -> int:
        """Untimed exact check: the first rank sends a byte pattern in one ping-pong; the second
        counts the bytes that arrived wrong."""
        pattern = _byte_pattern(size)
        if self.first:
            self.send[:size] = pattern
        else:
            self.recv[:size] = 0
        self("pingpong", size, 1)
        if self.first:
            return 0
        received = self.recv[:size].to_numpy() if self.gpu is not None else self.recv[:size]
        return int((received != pattern).sum())

    def row(self, test: str, size: int, policy: Policy, impl: str, ranks: int) -> tuple[Optional[Record], int]:
        """One test at one size, checked then timed: (the pair's record on its first rank, None on the
        other; the bytes this rank's check found wrong, which the caller adds into the record)."""
        wrong = self.wrong(size)
        # The budget pays for whole iterations (a bandwidth window is `window` messages); the record
        # holds the time per message.
        window = self.window if test == "bandwidth" else 1
        if policy.timing == "loop":
            samples, calls = measure_loop(lambda loops, n: self(test, size, loops, n), policy)
            extra = {"timing": "loop", "loop_calls": calls}
        else:
            samples, extra = measure(lambda n: self(test, size, n), policy), {}
        rec = measured(test, impl, "uint8", "none", ranks, size, size, samples / window, 0, pair=self.ranks,
                       window=window, **extra) if self.first else None
        return rec, wrong

    def close(self) -> None:
        self.link.close()


def open_pairs(world, cfg: RunConfig, pairs, nbytes: int) -> Optional[PairTimers]:
    """This rank's PairTimers among the disjoint `pairs`, on cfg's transport; None on a rank in no
    pair. Collective over the world (MPI gives every pair of a round its communicator at once)."""
    link = transport(cfg.impls[0]).open_pairs(world, pairs, cfg.window)
    mine = next((pair for pair in pairs if world.rank in pair), None)
    return PairTimers(link, *mine, cfg.window, nbytes) if link is not None else None


def prepare_pairs(world, cfg: RunConfig, command: str, peers: int = 1) -> None:
    """What every rank does before pairs of cfg's transport are timed, members of a pair or not; a rank
    meets `peers` others in turn (NCCL keeps each connection it made)."""
    transport(cfg.impls[0]).prepare(world, cfg, command)
    if cfg.device == "cuda":
        largest = max(cfg.sizes)
        check_device_memory(world, p2p_bytes(largest), f"a p2p message of {format_size(largest)}", p2p_peers=peers)


def run_p2p(world, cfg: RunConfig, reporter) -> int:
    impl = cfg.impls[0]
    prepare_pairs(world, cfg, "commbench p2p")
    largest = max(cfg.sizes)
    total_wrong = 0
    for a, b in cfg.pairs:
        timers = open_pairs(world, cfg, [(a, b)], largest)
        for test, description in P2P_TESTS.items():
            block = f"{impl} {test} {a}->{b}"
            if reporter:
                reporter.block(block, f"{impl.upper()} {description}")
            for size in cfg.sizes:
                watchdog.arm(f"p2p {block} {format_size(size)}")
                if reporter:
                    reporter.step(f"{block} {format_size(size)}")
                rec, wrong = timers.row(test, size, cfg.policy, impl, world.size) if timers is not None else (None, 0)
                got = world.gather((rec, wrong))
                if reporter:
                    rec = next(r for r, _ in got if r is not None).but(wrong=sum(w for _, w in got))
                    total_wrong += rec.wrong
                    reporter.add(rec, block, format_size(size))
        if timers is not None:
            timers.close()
    return world.bcast(total_wrong)
