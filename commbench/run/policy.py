"""Iteration policy: warm up, then choose the number of timed iterations from a time budget; and the
timing convention that makes a sample of them (TIMINGS)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Optional

import numpy as np

# How a sample is taken. per-iteration: one call after a barrier, timed alone (on GPUs launch-free: the
# stream is held while the call is enqueued), so every sample is one synchronised call of every rank
# and the slowest rank's time is the figure (OSU's collectives time each call alone too, but average
# each rank's own time over the ranks). loop: nccl-tests', N calls back to back between two
# timestamps after a barrier, the time per call, averaged over the ranks.
TIMINGS = ("per-iteration", "loop")


@dataclass(frozen=True)
class Policy:
    warmup: int = 5  # warm-up iterations (adaptive mode spends at most half the budget on them)
    iters: Optional[int] = None  # fixed count of timed iterations; None = choose from the budget
    budget_ms: float = 200.0  # time to spend on timed iterations of one size
    min_iters: int = 5  # floor on samples whatever the budget
    max_iters: int = 2000  # ceiling for tiny messages
    timing: str = "per-iteration"  # one of TIMINGS
    loops: int = 5  # loop timing: loops per size, each of N calls (N: iters or from the budget)

    def describe(self) -> dict:
        d = asdict(self)
        d["rule"] = self.rule()
        return d

    def rule(self) -> str:
        """The policy in one line: in the result file and in the header of a run."""
        if self.timing == "loop":
            calls = (f"{self.iters} calls" if self.iters else
                     f"N calls (N = {self.budget_ms:g} ms budget / ({self.loops} x the warm-up's time per call), "
                     f"clamped to [{self.min_iters}, {self.max_iters}])")
            return f"{self.loops} loops per size, each of {calls} back to back, after a warm-up loop of {self.warmup} call(s)"
        if self.iters:
            return f"{self.iters} timed iterations per size after {self.warmup} warm-up(s)"
        return (f"timed iterations = {self.budget_ms:g} ms budget / warm-up median, clamped to [{self.min_iters}, "
                f"{self.max_iters}]; up to {self.warmup} warm-up(s) within half the budget and what "
                f"{self.min_iters} timed iterations leave of it: one where those alone exceed the budget, the "
                f"timed iterations' median then checking the count")


def measure(timer: Callable[[int], np.ndarray], policy: Policy,
            first: Optional[np.ndarray] = None, ops: int = 1) -> np.ndarray:
    """Runs warm-up and timed iterations through timer(n), which returns n per-iteration seconds
    already reduced over ranks; because every rank sees the same samples, every rank chooses the
    same iteration count. `first` is an iteration already run (the untimed correctness check),
    which then counts as the first warm-up iteration. An iteration is `ops` operations (--agg) and
    timer's seconds are per operation: the budget counts them all."""
    first = timer(1) if first is None else first
    if policy.iters:
        if policy.warmup > 1:
            timer(policy.warmup - 1)
        return timer(policy.iters)
    budget_s = policy.budget_ms * 1e-3
    estimate = float(first[0]) * ops
    extra = policy.warmup - 1
    if estimate > 0:
        # Warm-ups are paid for from the budget, never beyond it: where min_iters timed iterations
        # alone exceed the budget (large messages), the check is the only warm-up.
        spare = min(0.5 * budget_s, budget_s - policy.min_iters * estimate)
        extra = min(extra, int(spare / estimate)) if spare > 0 else 0
    if extra > 0:
        # The first iteration pays for first touch and connection set-up; the rest estimate better.
        estimate = float(np.median(timer(extra))) * ops
    count = _count(policy, budget_s, estimate)
    samples = timer(count)
    if extra == 0:
        # The estimate was the first iteration's alone, which may have been set-up (NCCL connecting its
        # peers: tens of ms across nodes) more than the call: where the timed iterations say that at
        # least twice as many fit in the budget, they were warm-ups, and that many are timed.
        again = _count(policy, budget_s, float(np.median(samples)) * ops)
        if again >= 2 * count:
            samples = timer(again)
    return samples


def _count(policy: Policy, budget_s: float, estimate: float) -> int:
    """Timed iterations of `estimate` seconds each that the budget holds, clamped."""
    wanted = int(budget_s / estimate) if estimate > 0 else policy.max_iters
    return max(policy.min_iters, min(policy.max_iters, wanted))


def measure_loop(timer: Callable[[int, int], np.ndarray], policy: Policy, ops: int = 1) -> tuple[np.ndarray, int]:
    """Loop timing: timer(loops, calls) runs `loops` loops of `calls` back-to-back calls and returns each
    loop's seconds per call. A warm-up loop of policy.warmup calls, whose time per call sets N where
    --iters does not; returns (policy.loops samples, N). A call is `ops` operations (--agg) and timer's
    seconds are per operation: the budget counts them all."""
    estimate = float(timer(1, policy.warmup)[0]) * ops
    if policy.iters:
        calls = policy.iters
    else:
        wanted = int(policy.budget_ms * 1e-3 / (policy.loops * estimate)) if estimate > 0 else policy.max_iters
        calls = max(policy.min_iters, min(policy.max_iters, wanted))
    return timer(policy.loops, calls), calls
