"""A step's time, estimated before it runs from what its command would measure (cli.common.Checked),
so that a plan's limits hold on the largest node it meets (8 GPUs a host) and a plan that would run
into them is refused before its first step.

The estimate is the start and, per measurement (a size of a series: one pair of a matrix, one impl,
dtype and placement of a collective), the time the iteration policy spends on it: the timed
iterations' budget, up to half as much again for warm-ups (policy.measure), and the untimed check,
its count and the row's write. A healthy node spends at most this; a step's limit must be at least
twice the estimate, so that only a hang reaches it. A bandwidth test whose window of messages alone
outlasts the budget takes what its iterations take: links at host level (host_links_s)."""

from __future__ import annotations

# A step's start before its first measurement: the launch, each rank's imports and, on GPUs, CUDA's
# context and NCCL's communicator, about 13 s on one H100 before the start was cut; 20 s leaves room
# for 8 GPUs' communicators.
START_S = {"cpu": 2.0, "cuda": 20.0}
# A measurement beyond its iterations: the untimed check and its count, the row written.
OVERHEAD_S = 0.05
WARMUP_SHARE = 0.5  # warm-ups take at most half the budget (policy.measure)
LIMIT_SHARE = 0.5  # a step's estimate takes at most this share of its timeout_s
# A flow's rate for an estimate: the slowest a healthy GPU cluster gives one (100 Gb/s), so that a
# window of large messages is not taken for quicker than it is.
SLOWEST_FLOW_GBPS = 12.5
# Confirmation rounds a healthy cluster runs (a suspect's partners, analysis/host/verdicts.CONFIRMATIONS).
CONFIRM_ROUNDS = 3


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


def bandwidth_s(policy, window: int, size_bytes: int, gbps: float = SLOWEST_FLOW_GBPS) -> float:
    """Seconds one windowed bandwidth measurement takes: the budget's, or, where a window of messages
    outlasts it, the iterations that run whatever the budget (one warm-up and the least timed count)."""
    window_s = window * size_bytes / (gbps * 1e9)
    if policy is None:
        return OVERHEAD_S + window_s
    iterations = (policy.iters or policy.min_iters) + 1
    return max(measurement_s(policy), iterations * window_s + OVERHEAD_S)


def host_links_s(rounds, policy, window: int, bandwidth_size: int, device: str = "cuda") -> float:
    """Seconds `links --level host` takes over these first rounds (analysis/host/level.first_rounds)
    and a healthy cluster's confirmation: each round a ping-pong and the bandwidth test, both ways
    between hosts."""
    bandwidth = bandwidth_s(policy, window, bandwidth_size)
    per_round = [measurement_s(policy) + (2 if r.both else 1) * bandwidth for r in rounds]
    return START_S.get(device, START_S["cuda"]) + sum(per_round) + CONFIRM_ROUNDS * (measurement_s(policy) + 2 * bandwidth)
