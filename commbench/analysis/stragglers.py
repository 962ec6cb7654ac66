"""Stragglers: what the slowest rank costs the others. The native loops return each rank's own time
per iteration; every rank gathers all of them (World.all_times), and the slowest rank's time stays
the headline (run/collective.py's Timings). Each record's per-rank figures and straggler finding are
made with it (results/arrival.py); here, --delay and the summary lines of the stragglers found."""

from __future__ import annotations

import math
from typing import Optional

from ..errors import CommbenchError


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
            found = hits[0]["straggler"]
            who = (f"process {found['process']} (ranks {rank}-{rank + found['process_ranks'] - 1}, host {found['host']})"
                   if "process" in found else f"rank {rank} (host {found['host']})")
            line = (f"straggler: {label(key)}: {who} arrives "
                    f"{_span(waited)} late at {where}; the others wait for it (= {_span(waited)} of the "
                    f"{_span([r['time_us']['median'] for r in hits])} per call)")
            lines.append(line + ("; it is the rank --delay holds back" if delay and delay["rank"] == rank else ""))
    return lines


# Where the slowest rank's time (the headline) exceeds the median rank's by this share, a GPU run across
# hosts says both: the device barrier that starts each iteration releases the hosts' GPUs at
# different times, and at small sizes that finishing skew is much of the slowest rank's time.
RANK_SPREAD_SHARE = 0.25


def median_rank_lines(doc: dict) -> list[str]:
    """Of a GPU run across hosts, one line per series whose headline (the slowest rank, per iteration)
    exceeds its median rank's own time by RANK_SPREAD_SHARE or more: the sizes, and both times."""
    from ..results.series import by_series, label
    from ..sizes import format_size
    if doc["config"].get("device") != "cuda" or len(set(doc["machine"].get("hosts") or [])) < 2:
        return []
    lines = []
    for key, recs in by_series(doc["results"]).items():
        hits = []
        for r in recs:
            ranks = [p["median_us"] for p in r.get("per_rank") or []]
            if ranks:
                middle = sorted(ranks)[len(ranks) // 2]
                if r["time_us"]["median"] >= (1 + RANK_SPREAD_SHARE) * middle:
                    hits.append((r, middle))
        if hits:
            where = "every size" if len(hits) == len(recs) else ", ".join(format_size(r["size_bytes"]) for r, _ in hits)
            lines.append(f"median rank: {label(key)}: at {where} the median rank took {_span([m for _, m in hits])} "
                         f"where the slowest took {_span([r['time_us']['median'] for r, _ in hits])} (the time "
                         f"shown): across hosts the device barrier releases the GPUs at different times, and that "
                         f"finishing skew is part of the slowest rank's time")
    return lines
