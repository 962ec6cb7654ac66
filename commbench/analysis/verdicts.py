"""Fits of a run, with verdicts against an expected fabric, as records (--json) and as text."""

from __future__ import annotations

from typing import Optional

from ..results.series import variant
from ..sizes import format_size
from .fabrics import ABOVE_PCT, Expectation, verdict
from .fit import fit_records


def fits_with_verdicts(records: list[dict], expected: Optional[Expectation], pass_pct: float,
                       fail_pct: float) -> list[dict]:
    fits = fit_records(records)
    if expected is not None:
        for f in fits:
            if "skipped" in f:
                continue
            status, pct = verdict(f["bandwidth_gbps"], expected, pass_pct, fail_pct)
            f["expected"] = {"fabric": expected.name, "bandwidth_gbps": expected.bandwidth_gbps,
                             "alpha_us": list(expected.alpha_us) if expected.alpha_us else None,
                             "source": expected.source}
            f["percent_of_expected"] = pct
            f["verdict"] = status
            lo_hi = expected.alpha_us
            # A negative intercept means the segment is bandwidth-bound and says nothing about latency.
            f["alpha_in_range"] = None if lo_hi is None or f["alpha_us"] < 0 else bool(f["alpha_us"] <= lo_hi[1])
    return fits


def _bw(x: Optional[float]) -> str:
    return "latency-bound" if x is None else f"{x:.3g}"


def _ci(ci) -> str:
    return "" if not ci else f"[{ci[0]:.3g}, {ci[1]:.3g}]"


def span(sizes: list[int]) -> str:
    return f"{format_size(sizes[0])}-{format_size(sizes[1])}"


def fit_lines(fits: list[dict]) -> list[str]:
    lines = ["#", "# fit: t(n) = a + b*n per (op, impl, ranks), weighted by 1/t^2, segmented where the slope changes;",
             "# through each algorithm's cost model: alpha = per-message latency, from the segment of the smallest",
             "# sizes; bandwidth = link GB/s, from the segment of the largest (95% bootstrap CI over the samples)"]
    for f in fits:
        who = f"{f['op']} {variant(f)} ({f['ranks']} ranks" + (f", pair {f['pair'][0]}-{f['pair'][1]}" if f.get("pair") else "") \
            + (", both ways)" if f.get("bidirectional") else ")")
        if "skipped" in f:
            lines.append(f"# {who}: no fit, {f['skipped']}")
            continue
        note = " (effective values: the library's algorithm is unknown)" if f["effective"] else ""
        unresolved = " (negative intercept: latency not resolved at these sizes)" if f["alpha_us"] < 0 else ""
        r2 = f", R2 {f['segments'][0]['r2']:.3f}" if len(f["segments"]) == 1 else ""
        lines.append(f"# {who}: alpha {f['alpha_us']:.3g} us{unresolved} {_ci(f['alpha_us_ci'])} from "
                     f"{span(f['alpha_segment'])}, bandwidth {_bw(f['bandwidth_gbps'])} GB/s "
                     f"{_ci(f['bandwidth_gbps_ci'])} from {span(f['bandwidth_segment'])}{r2}; {f['model']}{note}")
        if "verdict" in f:
            pct = "n/a" if f["percent_of_expected"] is None else f"{f['percent_of_expected']:.0f}%"
            e = f["expected"]
            alpha = "" if f["alpha_in_range"] is None else (", alpha within range" if f["alpha_in_range"] else
                                                             f", alpha above the expected {e['alpha_us'][1]:g} us")
            above = (f"; above {ABOVE_PCT:.0f}% of it: the expectation (a fabric the run did not cross) or the method "
                     f"(messages a cache holds) is off" if (f["percent_of_expected"] or 0) > ABOVE_PCT else "")
            lines.append(f"#   {f['verdict']}: {_bw(f['bandwidth_gbps'])} of {e['bandwidth_gbps']:.3g} GB/s expected "
                         f"for {e['fabric']} = {pct}{alpha}{above} ({e['source']})")
        if len(f["segments"]) > 1:
            for s in f["segments"]:
                lines.append(f"#   segment {span([s['size_min'], s['size_max']])}: alpha "
                             f"{s['alpha_us']:.3g} us, bandwidth {_bw(s['bandwidth_gbps'])} GB/s, R2 {s['r2']:.3f}")
        if f["outlier_sizes"]:
            lines.append(f"#   off the fit: {', '.join(format_size(n) for n in f['outlier_sizes'])}")
    return lines
