"""Statistics over per-iteration samples, and the warnings a careful reader would want."""

from __future__ import annotations

import numpy as np

# Thresholds for warnings; each warning names a remedy.
HIGH_CV = 0.10
TIMER_FLOOR_FACTOR = 20.0


def summarize(samples_s: np.ndarray) -> dict[str, float]:
    """Per-iteration times in seconds -> summary in microseconds (cv is a fraction)."""
    us = np.asarray(samples_s, dtype=np.float64) * 1e6
    if us.size == 0:
        raise ValueError("no samples to summarize")
    mean = float(us.mean())
    stdev = float(us.std(ddof=1)) if us.size > 1 else 0.0
    return {
        "median": float(np.median(us)),
        "mean": mean,
        "min": float(us.min()),
        "max": float(us.max()),
        "p95": float(np.percentile(us, 95)),
        "p99": float(np.percentile(us, 99)),
        "stdev": stdev,
        "cv": stdev / mean if mean > 0 else 0.0,
    }


# What each flag means and what to do about it.
FLAG_TEXT = {
    "high_cv": (f"coefficient of variation above {HIGH_CV:.0%}",
                "stop other load on the node, raise --budget-ms or --iters, or pin ranks to cores"),
    "timer_floor": (f"median within {TIMER_FLOOR_FACTOR:.0f}x of the clock step",
                    "timer resolution distorts these sizes; read them as upper bounds"),
}


def sample_flags(time_us: dict[str, float], clock_floor_s: float) -> list[str]:
    """Flags (keys of FLAG_TEXT) raised by one (impl, size) measurement."""
    flags = []
    if time_us["cv"] > HIGH_CV:
        flags.append("high_cv")
    if time_us["median"] < TIMER_FLOOR_FACTOR * clock_floor_s * 1e6:
        flags.append("timer_floor")
    return flags
