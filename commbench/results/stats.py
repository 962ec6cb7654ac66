"""Statistics over per-iteration samples, and the warnings a careful reader would want."""

from __future__ import annotations

import numpy as np

# Thresholds for warnings; each warning names a remedy.
NOISY_SPREAD = 0.10  # interquartile range / median; robust, unlike CV, to a few long outliers
OUTLIER_Z = 14.0  # modified z-score beyond which a sample is an outlier (as hyperfine)
OUTLIER_SHARE = 0.01
TIMER_FLOOR_FACTOR = 20.0
# Iglewicz and Hoaglin's constant: the modified z-score of a normal sample has unit spread.
MAD_SCALE = 0.6745


def modified_z(values, mad_floor: float = 0.0) -> np.ndarray:
    """Each value's modified z-score, MAD_SCALE * (x - median) / MAD, with the MAD taken as at least
    `mad_floor`; zeros where the MAD is 0 (no spread: nothing stands out by z)."""
    x = np.asarray(values, dtype=np.float64)
    median = float(np.median(x))
    mad = max(float(np.median(np.abs(x - median))), mad_floor)
    return MAD_SCALE * (x - median) / mad if mad > 0 else np.zeros_like(x)


def iqr(samples) -> float:
    """Interquartile range (p75 - p25) of the samples, in their unit: a spread that a few long
    outliers, which inflate the standard deviation, leave alone."""
    q1, q3 = np.percentile(np.asarray(samples, dtype=np.float64), [25, 75])
    return float(q3 - q1)


def summarize(samples_s: np.ndarray) -> dict[str, float]:
    """Per-iteration times in seconds -> summary in microseconds (cv is a fraction, iqr in us)."""
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
        "iqr": iqr(us),
    }


# What each flag means and what to do about it.
FLAG_TEXT = {
    "noisy": (f"interquartile range above {NOISY_SPREAD:.0%} of the median",
              "stop other load on the node, raise --budget-ms or --iters, or pin ranks to cores"),
    "outliers": (f"more than {OUTLIER_SHARE:.0%} of iterations are outliers (modified z-score > {OUTLIER_Z:.0f})",
                 "look for interference (other jobs, daemons, interrupts, frequency changes); the median "
                 "headline is robust to them, the mean and max are not"),
    "timer_floor": (f"median within {TIMER_FLOOR_FACTOR:.0f}x of the clock step",
                    "timer resolution distorts these sizes; read them as upper bounds"),
}


def sample_flags(samples_us, clock_floor_s: float, per_timing: int = 1) -> list[str]:
    """Flags (keys of FLAG_TEXT) raised by the per-iteration samples of one (impl, size). A sample
    that is one timed interval divided by `per_timing` operations (a window of messages, a loop of
    calls, aggregated calls) is judged against the clock by its whole interval."""
    us = np.asarray(samples_us, dtype=np.float64)
    median = float(np.median(us))
    flags = []
    if median > 0 and iqr(us) / median > NOISY_SPREAD:
        flags.append("noisy")
    if np.count_nonzero(modified_z(us) > OUTLIER_Z) > OUTLIER_SHARE * us.size:
        flags.append("outliers")
    if median * per_timing < TIMER_FLOOR_FACTOR * clock_floor_s * 1e6:
        flags.append("timer_floor")
    return flags


def record_flags(record: dict, clock_floor_s: float) -> list[str]:
    """sample_flags of a record's samples, each judged by its whole timed interval: a window of
    messages, a loop of calls, --agg calls fused into one."""
    per_timing = record.get("window", 1) * record.get("loop_calls", 1) * record.get("agg", 1)
    return sample_flags(record["samples_us"], clock_floor_s, per_timing)


# Sizes a warning names one by one; of more (a fine sweep flags hundreds), the first and the last.
NAMED_SIZES = 8


def _sizes(labels: list[str]) -> str:
    if len(labels) <= NAMED_SIZES:
        return ", ".join(labels)
    return f"{', '.join(labels[:3])}, ... {labels[-1]} ({len(labels)} sizes)"


def flag_lines(flagged: dict) -> list[str]:
    """One warning line per kind of flag raised in a run: where (each impl with its sizes), the worst
    case's figures, and the remedy once. `flagged`: {(impl label, flag): [(size label, time_us), ...]}."""
    kinds: dict[str, list] = {}
    for (block, flag), hits in flagged.items():
        kinds.setdefault(flag, []).append((block, hits))
    lines = []
    for flag, blocks in kinds.items():
        what, remedy = FLAG_TEXT[flag]
        block, (size, t) = max(((b, h) for b, hits in blocks for h in hits),
                               key=lambda bh: bh[1][1]["max"] / max(bh[1][1]["median"], 1e-9))
        where = "; ".join(f"{b} at {_sizes([s for s, _ in hits])}" for b, hits in blocks)
        lines.append(f"{what}: {where} (e.g. {block} {size}: min {t['min']:.2f} / median {t['median']:.2f} / "
                     f"p99 {t['p99']:.2f} / max {t['max']:.2f} us); remedy: {remedy}")
    return lines
