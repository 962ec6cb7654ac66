"""Baseline against run: per size and impl, the change in bandwidth and latency; acceptance judged
per region (latency-bound sizes and bandwidth-bound sizes separately) and on the fitted alpha and
bandwidth; warnings where the machines differ."""

from __future__ import annotations

import math
from typing import Optional

from ..errors import CommbenchError
from ..results.document import timing_of
from ..results.series import series_head, series_key, variant
from .fit import fit_records

# A size is latency-bound when its bandwidth is under LAT_SHARE of the series' best, bandwidth-bound
# when over BW_SHARE; sizes in between are reported but not judged.
LAT_SHARE = 0.10
BW_SHARE = 0.50
# A series of one size cannot say where its bandwidth levels off: a message of at most this many bytes
# is taken as latency-bound (far below the half-bandwidth size of every fabric in the catalog: links'
# 8-byte ping-pong), a larger one as bandwidth-bound.
SINGLE_SIZE_LATENCY_MAX = 4096


def _bw(r: dict) -> float:
    return r["busbw_gbps"] if r.get("busbw_gbps") is not None else r["algbw_gbps"]


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def metadata_warnings(base: dict, run: dict) -> list[str]:
    out = []

    def pick(doc, *path):
        for p in path:
            doc = (doc or {}).get(p) if isinstance(doc, dict) else None
        return doc
    fields = [("CPU model", ("machine", "cpu_model")), ("rank count", ("machine", "ranks")),
              ("MPI library", ("machine", "mpi")), ("torch", ("machine", "torch")),
              ("GPU driver", ("topology", "gpus", "driver")), ("NCCL", ("topology", "libraries", "nccl")),
              ("topology fingerprint", ("topology_fingerprint",))]
    for label, path in fields:
        a, b = pick(base, *path), pick(run, *path)
        if a != b:
            out.append(f"{label} differs: baseline {a}, run {b}")
    gpus = lambda d: sorted({g["name"] for g in pick(d, "topology", "gpus", "devices") or []})  # noqa: E731
    if gpus(base) != gpus(run):
        out.append(f"GPU models differ: baseline {gpus(base) or 'none'}, run {gpus(run) or 'none'}")
    return out


def compare(base: dict, run: dict, tol_bw: float, tol_lat: float, force: bool = False) -> dict:
    """The comparison as a dict: rows per size, verdicts per series and region, warnings, status. Runs
    timed by different conventions differ by the convention as much as by the machine: refused unless
    `force`, then warned."""
    timings = timing_of(base), timing_of(run)
    if timings[0] != timings[1] and not force:
        raise CommbenchError(f"the baseline was timed {timings[0]} and the run {timings[1]} (--timing): a loop of "
                             f"back-to-back calls and one synchronised call per iteration differ by the convention, "
                             f"not the machine; measure both the same way, or give --force")
    def by_series(doc):
        out: dict = {}
        for r in doc["results"]:
            if r["time_us"]["median"] > 0 and _bw(r) > 0:  # empty messages: nothing to compare
                out.setdefault(series_key(r), {})[r["size_bytes"]] = r
        return out
    base_by, run_by = by_series(base), by_series(run)
    common = [k for k in base_by if k in run_by and set(base_by[k]) & set(run_by[k])]
    if not common:
        raise CommbenchError("baseline and run share no (op, impl, ranks, dtype) series at any size: nothing to compare")
    base_fits = {series_key(f): f for f in fit_records(base["results"])}
    run_fits = {series_key(f): f for f in fit_records(run["results"])}
    series = []
    for key in common:
        b_rows, r_rows = base_by[key], run_by[key]
        sizes = sorted(set(b_rows) & set(r_rows))
        best = max(_bw(b_rows[s]) for s in sizes)
        rows, lat, bw = [], [], []
        for s in sizes:
            b, r = b_rows[s], r_rows[s]
            t_ratio = r["time_us"]["median"] / b["time_us"]["median"]
            bw_ratio = _bw(r) / _bw(b)
            share = _bw(b) / best
            if len(sizes) == 1:
                region = "latency" if s <= SINGLE_SIZE_LATENCY_MAX else "bandwidth"
            else:
                region = "latency" if share < LAT_SHARE else "bandwidth" if share >= BW_SHARE else "transition"
            rows.append({"size_bytes": s, "region": region, "base_time_us": b["time_us"]["median"],
                         "run_time_us": r["time_us"]["median"], "time_change": t_ratio - 1,
                         "base_bw_gbps": _bw(b), "run_bw_gbps": _bw(r), "bw_change": bw_ratio - 1})
            if region == "latency":
                lat.append(t_ratio)
            elif region == "bandwidth":
                bw.append(bw_ratio)
        checks = []
        if lat:
            change = _geomean(lat) - 1
            checks.append({"check": "latency sizes", "change": change, "tolerance": tol_lat,
                           "regression": change > tol_lat, "sizes": len(lat)})
        if bw:
            change = _geomean(bw) - 1
            checks.append({"check": "bandwidth sizes", "change": change, "tolerance": -tol_bw,
                           "regression": change < -tol_bw, "sizes": len(bw)})
        bf, rf = base_fits.get(key), run_fits.get(key)
        if bf and rf and "skipped" not in bf and "skipped" not in rf:
            checks += _fit_checks(bf, rf, tol_bw, tol_lat)
        series.append({**series_head(key), "rows": rows, "checks": checks})
    # A run with wrong results passes no comparison, however fast it was.
    wrong = sum(r.get("wrong") or 0 for r in run["results"])
    regression = wrong > 0 or any(c["regression"] for s in series for c in s["checks"])
    return {"status": "regression" if regression else "pass", "wrong": wrong, "tolerance_bw": tol_bw, "tolerance_lat": tol_lat,
            "warnings": metadata_warnings(base, run) + ([f"timing differs: baseline {timings[0]}, run {timings[1]}"]
                                                         if timings[0] != timings[1] else []), "series": series}


def _disjoint(a: Optional[list], b: Optional[list]) -> bool:
    return bool(a and b) and (a[1] < b[0] or b[1] < a[0])


def _fit_checks(bf: dict, rf: dict, tol_bw: float, tol_lat: float) -> list[dict]:
    """The fitted bandwidth (of the largest-size segments) and alpha (of the smallest-size ones); a
    change counts as a regression only beyond the tolerance and outside both bootstrap intervals (the
    fits are noisier than the medians they come from)."""
    out = []
    if bf["bandwidth_gbps"] and rf["bandwidth_gbps"]:
        change = rf["bandwidth_gbps"] / bf["bandwidth_gbps"] - 1
        out.append({"check": "fitted bandwidth", "change": change, "tolerance": -tol_bw,
                    "regression": change < -tol_bw and _disjoint(bf["bandwidth_gbps_ci"], rf["bandwidth_gbps_ci"])})
    if bf["alpha_us"] > 0 and rf["alpha_us"] > 0:
        change = rf["alpha_us"] / bf["alpha_us"] - 1
        out.append({"check": "fitted alpha", "change": change, "tolerance": tol_lat,
                    "regression": change > tol_lat and _disjoint(bf["alpha_us_ci"], rf["alpha_us_ci"])})
    return out


def compare_lines(result: dict) -> list[str]:
    from ..sizes import format_size
    lines = []
    for s in result["series"]:
        who = f"{s['op']} {variant(s)} ({s['ranks']} ranks, {s.get('dtype')}" + \
            (f", pair {s['pair'][0]}-{s['pair'][1]})" if s.get("pair") else ")")
        lines.append(f"# {who}")
        lines.append(f"#{'size':>11}{'region':>12}{'base us':>12}{'run us':>12}{'time':>9}{'base GB/s':>11}{'run GB/s':>10}{'bw':>9}")
        for r in s["rows"]:
            lines.append(f"{format_size(r['size_bytes']):>12}{r['region']:>12}{r['base_time_us']:>12.2f}{r['run_time_us']:>12.2f}"
                         f"{r['time_change']:>+9.1%}{r['base_bw_gbps']:>11.3f}{r['run_bw_gbps']:>10.3f}{r['bw_change']:>+9.1%}")
        for c in s["checks"]:
            limit = f"{c['tolerance']:+.0%}"
            lines.append(f"#   {'REGRESSION' if c['regression'] else 'ok':<10} {c['check']}: {c['change']:+.1%} (limit {limit})")
    if result["wrong"]:
        lines.append(f"# REGRESSION: the run has {result['wrong']} wrong element(s): a run with wrong results passes "
                     f"no comparison")
    for w in result["warnings"]:
        lines.append(f"# warning: {w}")
    lines.append(f"# compare: {result['status'].upper()}")
    return lines
