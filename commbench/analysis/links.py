"""Which link, rank or host is bad? From every rank pair's latency and bandwidth, measured one pair at
a time ("clean") and in rounds of disjoint pairs at once ("loaded"): the rank x rank matrices, the
pairs that fall outside their comparable pairs, and who the slow pairs point at.

Comparable pairs are those of one class: intra-host (both ranks on one host name) or inter-host;
shared memory and a network are never judged against each other. A class's typical value is the
median over its ranks of each rank's median pair: one slow rank touches up to half of the pairs (3
of 6 at 4 ranks) and would drag the plain median of the pairs half-way down, while the other ranks'
own medians stay on the good pairs. A pair is flagged when its bandwidth is below `threshold` of its
class's typical value (its latency above typical / `threshold`), or, with `mad_z`, when its modified
z-score (0.6745 (x - typical) / MAD) passes mad_z the slow way. The z-score is off by default: where
half of the pairs are slow, the MAD is as large as their distance and no pair stands out by it.

Attribution: a rank all (from 4 ranks on: all but one) of whose pairs are flagged is a slow rank; a
host all of whose ranks are slow is a slow host; a flagged pair of neither is a slow link.

Everything here is a pure function of a result file's rows and the ranks' host names, so a run can
be judged again with another threshold (`commbench links --from RUN`)."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..errors import CommbenchError
from ..results.stats import MAD_SCALE
from ..sizes import format_size

# A links row's `schedule`, which keeps its series apart from the other schedule's (series.py).
SCHEDULES = {"clean": "one pair at a time", "loaded": "under load"}
METRICS = {"latency_us": "latency", "bandwidth_gbps": "bandwidth"}


def schedule(p: int) -> list[list[tuple[int, int]]]:
    """Rounds of disjoint pairs that cover every pair of p ranks once (the circle method): p - 1
    rounds for even p, p rounds with one rank idle each for odd p."""
    if p < 2:
        raise CommbenchError(f"links needs at least 2 ranks, not {p}")
    return [circle_round(p, r) for r in range(circle_rounds(p))]


def circle_rounds(p: int) -> int:
    """How many rounds of disjoint pairs cover every pair of p: p - 1, or p for odd p."""
    return p - 1 + p % 2


def circle_round(p: int, r: int) -> list[tuple[int, int]]:
    """Round r of the circle method over 0..p-1: alone, so that a few rounds of thousands of hosts
    cost O(p) each and never the whole O(p^2) table."""
    n = p + p % 2  # odd p: a phantom member n - 1, whose partner sits the round out
    # Member n - 1 stays put; the others turn one place per round around the circle.
    circle = [n - 1] + [(r + k) % (n - 1) for k in range(n - 1)]
    pairs = [tuple(sorted((circle[k], circle[n - 1 - k]))) for k in range(n // 2)]
    return sorted(pair for pair in pairs if pair[1] < p)


def pair_class(hosts: list[str], a: int, b: int) -> str:
    return "intra-host" if hosts[a] == hosts[b] else "inter-host"


def matrices(records: list[dict], impl: str, p: int) -> dict:
    """{schedule: {metric: p x p list, None where unmeasured}} from a result file's rows: latency
    is the ping-pong's median one-way time, bandwidth the windowed test's algbw."""
    out = {s: {m: [[None] * p for _ in range(p)] for m in METRICS} for s in SCHEDULES}
    for r in records:
        if r.get("pair") is None or r["impl"] != impl or r.get("schedule") not in SCHEDULES \
                or r["op"] not in ("pingpong", "bandwidth"):
            continue
        a, b = r["pair"]
        metric = "latency_us" if r["op"] == "pingpong" else "bandwidth_gbps"
        value = r["time_us"]["median"] if r["op"] == "pingpong" else r["algbw_gbps"]
        grid = out[r["schedule"]][metric]
        grid[a][b] = grid[b][a] = value
    return out


def _pairs(p: int):
    return [(a, b) for a in range(p) for b in range(a + 1, p)]


def typical(grid: list, pairs: list[tuple[int, int]]) -> float:
    """The median over the ranks of `pairs` of each rank's median pair (see the module docstring)."""
    ranks = sorted({r for pair in pairs for r in pair})
    return float(np.median([np.median([grid[a][b] for a, b in pairs if r in (a, b)]) for r in ranks]))


def outliers(grid: list, hosts: list[str], metric: str, threshold: float, mad_z: Optional[float]) -> list[dict]:
    """The flagged pairs of one matrix, each with its class, value, the class's typical value
    (`median`), the ratio to it (value / typical for bandwidth, typical / value for latency: below 1
    is worse) and z."""
    by_class: dict[str, list[tuple[int, int]]] = {}
    for a, b in _pairs(len(grid)):
        if grid[a][b] is not None:
            by_class.setdefault(pair_class(hosts, a, b), []).append((a, b))
    flagged = []
    for cls, pairs in by_class.items():
        values = np.array([grid[a][b] for a, b in pairs], dtype=float)
        median = typical(grid, pairs)
        mad = float(np.median(np.abs(values - median)))
        for (a, b), v in zip(pairs, values):
            # Oriented so that "worse" is low for both metrics.
            ratio = (v / median if metric == "bandwidth_gbps" else median / v) if v > 0 and median > 0 else 1.0
            z = MAD_SCALE * (v - median) / mad if mad > 0 else 0.0  # no spread: no pair stands out by z
            slow_z = -z if metric == "bandwidth_gbps" else z
            if ratio < threshold or (mad_z is not None and slow_z > mad_z):
                flagged.append({"pair": [a, b], "class": cls, "value": float(v), "median": median,
                                "ratio": ratio, "z": z})
    return flagged


def attribute(flagged: list[dict], hosts: list[str]) -> list[dict]:
    """Who the flagged pairs of one matrix point at: slow hosts, then slow ranks, then slow links."""
    p = len(hosts)
    need = p - 2 if p >= 4 else p - 1  # a rank's pairs that must be slow: one may be spared from 4 ranks on
    count = [0] * p
    for f in flagged:
        for r in f["pair"]:
            count[r] += 1
    slow = [r for r in range(p) if count[r] >= need]
    found = []
    several_hosts = len(set(hosts)) > 1
    by_host: dict[str, list[int]] = {}
    for r in range(p):
        by_host.setdefault(hosts[r], []).append(r)
    named: set[int] = set()
    for host, ranks in by_host.items():
        if several_hosts and all(r in slow for r in ranks):
            found.append(_finding("host", host, ranks, flagged))
            named.update(ranks)
    for r in slow:
        if r not in named:
            found.append(_finding("rank", str(r), [r], flagged))
            named.add(r)
    for f in flagged:
        if not named.intersection(f["pair"]):
            found.append(_finding("link", f"{f['pair'][0]}-{f['pair'][1]}", f["pair"], [f]))
    return found


def _finding(kind: str, subject: str, ranks: list[int], flagged: list[dict]) -> dict:
    mine = [f for f in flagged if set(ranks).intersection(f["pair"])]
    return {"kind": kind, "subject": subject, "ranks": list(ranks), "pairs": [f["pair"] for f in mine],
            "ratio": float(np.median([f["ratio"] for f in mine]))}


def judge(records: list[dict], impl: str, hosts: list[str], threshold: float, mad_z: Optional[float],
          judged=tuple(METRICS)) -> dict:
    """The matrices, flagged pairs and findings of a run (of the `judged` metrics): what the `links`
    section keeps."""
    p = len(hosts)
    grids = matrices(records, impl, p)
    flagged, findings = [], []
    for sched, by_metric in grids.items():
        for metric in judged:
            grid = by_metric[metric]
            mine = outliers(grid, hosts, metric, threshold, mad_z)
            flagged += [{"schedule": sched, "metric": metric, **f} for f in mine]
            for f in attribute(mine, hosts):
                f.update(schedule=sched, metric=metric)
                f["text"] = finding_text(f, hosts, p)
                findings.append(f)
    return {"matrices": grids, "flagged": flagged, "findings": findings}


def _figure(f: dict) -> str:
    if f["metric"] == "bandwidth_gbps":
        return f"{100 * f['ratio']:.0f} % of the typical bandwidth"
    return f"{1 / f['ratio']:.1f}x the typical latency" if f["ratio"] > 0 else "an unmeasurable latency"


def finding_text(f: dict, hosts: list[str], p: int) -> str:
    where = SCHEDULES[f["schedule"]]
    if f["kind"] == "host":
        ranks = ("rank " if len(f["ranks"]) == 1 else "ranks ") + ",".join(map(str, f["ranks"]))
        return f"slow host {f['subject']}: every pair of {ranks} runs at {_figure(f)} ({where})"
    if f["kind"] == "rank":
        r = f["ranks"][0]
        return (f"slow rank {r} on {hosts[r]}: {len(f['pairs'])} of its {p - 1} pairs run at {_figure(f)} "
                f"({where})")
    a, b = f["ranks"]
    return (f"slow link {a}-{b} ({pair_class(hosts, a, b)}, {hosts[a]} - {hosts[b]}): runs at {_figure(f)} "
            f"of comparable pairs ({where})")


def _cell(v: Optional[float], digits: int, mark: bool) -> str:
    return "- " if v is None else f"{v:.{digits}f}{'*' if mark else ' '}"


def matrix_lines(grid: list, title: str, digits: int, marked: set) -> list[str]:
    p = len(grid)
    width = max([7] + [len(_cell(v, digits, False)) for row in grid for v in row if v is not None])
    # A flagged cell's star takes the place of the space after the number, so columns stay aligned.
    out = [f"# {title}", "# " + " " * 6 + "".join(f" {b:>{width - 1}} " for b in range(p)).rstrip()]
    for a in range(p):
        cells = ["- " if a == b else _cell(grid[a][b], digits, (min(a, b), max(a, b)) in marked) for b in range(p)]
        out.append((f"  {a:>6}" + "".join(f" {c:>{width}}" for c in cells)).rstrip())
    return out


def host_lines(grid_lat: list, grid_bw: list, hosts: list[str]) -> list[str]:
    """Per host, the median latency and bandwidth of its intra-host and its inter-host pairs."""
    out = [f"# {'host':<20} {'ranks':<12} {'intra lat(us)':>13} {'intra BW(GB/s)':>14} {'inter lat(us)':>13} "
           f"{'inter BW(GB/s)':>14}"]
    for host in dict.fromkeys(hosts):
        ranks = [r for r in range(len(hosts)) if hosts[r] == host]
        cells = []
        for cls in ("intra-host", "inter-host"):
            pairs = [(a, b) for a, b in _pairs(len(hosts)) if (a in ranks or b in ranks)
                     and pair_class(hosts, a, b) == cls and grid_bw[a][b] is not None]
            for grid, digits in ((grid_lat, 2), (grid_bw, 3)):
                cells.append(f"{np.median([grid[a][b] for a, b in pairs]):.{digits}f}" if pairs else "-")
        out.append(f"  {host:<20} {','.join(map(str, ranks)):<12} {cells[0]:>13} {cells[1]:>14} {cells[2]:>13} "
                   f"{cells[3]:>14}")
    return out


def lines(section: dict) -> list[str]:
    """The console view of a `links` section: matrices (flagged cells starred), hosts, findings."""
    hosts = section["hosts"]
    out = [f"# links: {len(hosts)} ranks on {len(set(hosts))} host(s), {section['impl']}; latency at "
           f"{format_size(section['latency_size'])}, bandwidth at {format_size(section['bandwidth_size'])}; "
           f"{' and '.join(METRICS[m] for m in section['judged'])} flagged (*) below {section['threshold_pct']:g} % "
           f"of the typical comparable pair"
           + (f" or beyond modified z {section['mad_z']:g}" if section.get("mad_z") is not None else "")]
    for sched, where in SCHEDULES.items():
        for metric, (title, digits) in {"latency_us": ("latency (us)", 2),
                                        "bandwidth_gbps": ("bandwidth (GB/s)", 3)}.items():
            marked = {tuple(f["pair"]) for f in section["flagged"] if f["schedule"] == sched and f["metric"] == metric}
            out += matrix_lines(section["matrices"][sched][metric], f"{title}, {where}", digits, marked)
    out.append("# per host, clean medians")
    out += host_lines(section["matrices"]["clean"]["latency_us"], section["matrices"]["clean"]["bandwidth_gbps"], hosts)
    out.append("#")
    out += [f["text"] for f in section["findings"]] or ["no slow link, rank or host found"]
    return out


def section(impl: str, hosts: list[str], latency_size: int, bandwidth_size: int, threshold_pct: float,
            mad_z: Optional[float], records: list[dict], judged=tuple(METRICS)) -> dict:
    """The `links` section of a result file."""
    return {"impl": impl, "hosts": list(hosts), "latency_size": latency_size, "bandwidth_size": bandwidth_size,
            "threshold_pct": threshold_pct, "mad_z": mad_z, "judged": list(judged),
            "rounds": [[list(pair) for pair in rnd] for rnd in schedule(len(hosts))],
            **judge(records, impl, hosts, threshold_pct / 100, mad_z, judged)}
