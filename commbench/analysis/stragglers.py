"""Stragglers: what the slowest rank costs the others. The native loops return each rank's own time
per iteration; every rank gathers all of them (World.all_times), and the slowest rank's time stays
the headline (run/collective.py's Timings). Per
rank, the arrival skew of an iteration is how long the others waited for it: after the common
barrier a rank that arrives late at the call waits least inside it, so its skew is the slowest
rank's time minus its own. Only times, never clock readings, travel between ranks: clocks of
different hosts are never compared."""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from ..errors import CommbenchError
from ..results.stats import TIMER_FLOOR_FACTOR

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


def parse_delay(text: Optional[str], timeout_s: float) -> Optional[tuple[int, float]]:
    """--delay RANK:US -> (rank, microseconds); whether the rank exists is checked once the rank
    count is known (preflight). A delay of --timeout or more would read as a dead rank."""
    if text is None:
        return None
    rank, _, us = text.partition(":")
    try:
        parsed = int(rank), float(us)
    except ValueError:
        raise CommbenchError(f"--delay {text!r}: write RANK:US, e.g. 1:2000 (rank 1 waits 2000 us before each call)") from None
    if parsed[0] < 0 or not math.isfinite(parsed[1]) or parsed[1] < 0:
        raise CommbenchError(f"--delay {text!r}: the rank must be 0 or more and US a finite number of "
                             f"microseconds, 0 or more")
    if parsed[1] * 1e-6 >= timeout_s:
        raise CommbenchError(f"--delay {text!r}: {parsed[1]:g} us is not below --timeout {timeout_s:g} s; the others "
                             f"would take the delayed rank for a dead one")
    return parsed


def delay_text(delay: dict, agg: int = 1) -> str:
    """The run's --delay (as its config records it), and what it does to the others."""
    text = f"rank {delay['rank']} delayed by {delay['us']:g} us before each call: the others' time grows by about that much"
    return text + (f" per iteration of {agg} calls (about {delay['us'] / agg:g} us per call)" if agg > 1 else "")


def _span(values: list[float]) -> str:
    """'2.0 ms', '1.9-2.1 ms' or '850.0 us-1.2 ms'."""
    low, high = (f"{x / 1e3:.1f} ms" if x >= 1e3 else f"{x:.1f} us" for x in (min(values), max(values)))
    if low == high:
        return low
    return f"{low.split()[0]}-{high}" if low.split()[1] == high.split()[1] else f"{low}-{high}"


def summary_lines(doc: dict) -> list[str]:
    """One line per series and straggling rank: at which sizes the others wait for it, and for how
    much of the time per call."""
    from ..results.document import timing_of
    from ..results.series import by_series, label
    from ..sizes import format_size
    delay = doc["config"].get("delay")
    lines = []
    if timing_of(doc) == "loop" and doc["results"]:
        # A loop's time covers many calls: no rank's arrival in any one of them is known.
        return ["straggler: not measured: loop timing has no per-iteration samples, so no rank's arrival "
                "skew (--timing per-iteration measures it)"]
    for key, recs in by_series(doc["results"]).items():
        by_rank: dict[int, list[dict]] = {}
        for r in recs:
            if "straggler" in r:
                by_rank.setdefault(r["straggler"]["rank"], []).append(r)
        for rank, hits in by_rank.items():
            where = "every size" if len(hits) == len(recs) else ", ".join(format_size(r["size_bytes"]) for r in hits)
            waited = [r["straggler"]["waited_us"] for r in hits]
            line = (f"straggler: {label(key)}: rank {rank} (host {hits[0]['straggler']['host']}) arrives "
                    f"{_span(waited)} late at {where}; the others wait for it (= {_span(waited)} of the "
                    f"{_span([r['time_us']['median'] for r in hits])} per call)")
            lines.append(line + ("; it is the rank --delay holds back" if delay and delay["rank"] == rank else ""))
    return lines
