"""Each rank's own times per iteration as a record's per-rank figures: its median, its arrival skew
(how long the others waited for it: after the common barrier a rank that arrives late at the call
waits least inside it, so its skew is the slowest rank's time minus its own) and the straggler
finding. Runs (run/collective.py) and imports of nccl-tests' per-process times (importers.py) make
them; analysis/stragglers.py reads them. Only times, never clock readings, travel between ranks:
clocks of different hosts are never compared."""

from __future__ import annotations

from typing import Optional

import numpy as np

from .stats import TIMER_FLOOR_FACTOR

# A rank is named once the others wait for it, at the median iteration, longer than this share of
# the time per call, and STANDS_OUT times longer than for any other rank: below that, the order in
# which the barrier releases the ranks and scheduling noise, which make several ranks a little late.
STRAGGLER_SHARE = 0.10
STANDS_OUT = 2.0


def per_rank(ranks_s: np.ndarray, hosts: list[str]) -> list[dict]:
    """Per rank: its own median time, and the median and p90 of its arrival skew (us)."""
    us = np.asarray(ranks_s, dtype=np.float64) * 1e6
    skew = us.max(axis=0) - us
    return [{"rank": r, "host": hosts[r], "median_us": round(float(np.median(us[r])), 4),
             "skew_median_us": round(float(np.median(skew[r])), 4),
             "skew_p90_us": round(float(np.percentile(skew[r], 90)), 4)} for r in range(len(us))]


def finding(ranks: list[dict], median_us: float, clock_floor_s: float) -> Optional[dict]:
    """The rank the others wait for, when they wait for it longer than STRAGGLER_SHARE of the time
    per call, STANDS_OUT times longer than for the next rank, and longer than the clock can be
    trusted to resolve; else None."""
    by_skew = sorted(ranks, key=lambda p: p["skew_median_us"])
    top, waited = by_skew[-1], by_skew[-1]["skew_median_us"]
    runner_up = by_skew[-2]["skew_median_us"] if len(by_skew) > 1 else 0.0
    if waited <= max(STRAGGLER_SHARE * median_us, STANDS_OUT * runner_up, TIMER_FLOOR_FACTOR * clock_floor_s * 1e6):
        return None
    return {"rank": top["rank"], "host": top["host"], "waited_us": waited}


def figures(ranks_s: np.ndarray, hosts: list[str], median_us: float, clock_floor_s: float,
            same_work: bool = True) -> dict:
    """What a collective's record gains: `per_rank`, and `straggler` when one is found. Only where
    every rank does the same work (`same_work`): in a rooted collective the root's own time is short
    by its role (a broadcast's root only sends), and would read as a late arrival."""
    ranks = per_rank(ranks_s, hosts)
    found = finding(ranks, median_us, clock_floor_s) if same_work else None
    return {"per_rank": ranks, **({"straggler": found} if found else {})}
