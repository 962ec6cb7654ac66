"""A step's time, estimated before it runs from what its command would measure (cli.common.Checked),
so that a plan's limits hold on the largest node it meets (8 GPUs a host) and a plan that would run
into them is refused before its first step.

The estimate is the start and, per measurement (a size of a series: one pair of a matrix, one impl,
dtype and placement of a collective), the time the iteration policy spends on it: the timed
iterations' budget, up to half as much again for warm-ups (policy.measure), and the untimed check,
its count and the row's write. A healthy node spends at most this; a step's limit must be at least
twice the estimate, so that only a hang reaches it."""

from __future__ import annotations

# A step's start before its first measurement: the launch, each rank's imports and, on GPUs, CUDA's
# context and NCCL's communicator, about 13 s on one H100 before the start was cut; 20 s leaves room
# for 8 GPUs' communicators.
START_S = {"cpu": 2.0, "cuda": 20.0}
# A measurement beyond its iterations: the untimed check and its count, the row written.
OVERHEAD_S = 0.05
WARMUP_SHARE = 0.5  # warm-ups take at most half the budget (policy.measure)
LIMIT_SHARE = 0.5  # a step's estimate takes at most this share of its timeout_s


def measurement_s(policy) -> float:
    """Seconds one measurement takes under `policy` (None: a command that times no budget). A fixed
    --iters count takes the overhead alone: its iterations' time depends on the size."""
    if policy is None or policy.iters:
        return OVERHEAD_S
    return (1 + WARMUP_SHARE) * policy.budget_ms * 1e-3 + OVERHEAD_S


def estimate_s(checked) -> float:
    """The step's seconds, from the Checked its command raised under check_only()."""
    return START_S.get(checked.device, START_S["cuda"]) + checked.measurements * measurement_s(checked.policy)


def too_long(checked, timeout_s: float) -> str:
    """Why the step would reach for its limit ('' where it fits)."""
    estimate = estimate_s(checked)
    if estimate <= LIMIT_SHARE * timeout_s:
        return ""
    return (f"{checked.measurements:,} measurements of about {measurement_s(checked.policy):.2f} s each, an estimated "
            f"{estimate:.0f} s, more than half its timeout_s {timeout_s:g}: measure fewer sizes or pairs, lower its "
            f"budget-ms, or raise its timeout_s")
