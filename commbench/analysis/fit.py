"""Latency-bandwidth fits: t(n) = a + b n by weighted least squares on the per-size medians, with
automatic segmentation (libraries switch protocols by size), translated into per-message alpha and
link bandwidth through the cost model of the algorithm that ran (DESIGN: ring 2(p-1) steps, tree,
Hockney for point-to-point)."""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from ..collectives import cost_model
from ..collectives.cost import CostModel
from ..errors import CommbenchError
from ..results.series import series_head, series_key

MAX_SEGMENTS = 3
MIN_POINTS = 3  # per segment
GOOD_FIT_RMS = 0.03  # relative RMS error under which a line needs no further split
BOOTSTRAP = 200


def weighted_line(n: np.ndarray, t: np.ndarray) -> tuple[float, float, float]:
    """(a, b, weighted SSE) of t = a + b n with weights 1/t^2, i.e. least relative error."""
    w = 1.0 / np.maximum(t, 1e-15) ** 2
    sw, swn, swt = w.sum(), (w * n).sum(), (w * t).sum()
    swnn, swnt = (w * n * n).sum(), (w * n * t).sum()
    det = sw * swnn - swn * swn
    if abs(det) < 1e-300 * max(sw * swnn, 1e-300) or len(n) < 2:
        a, b = float(swt / sw), 0.0
    else:
        b = float((sw * swnt - swn * swt) / det)
        a = float((swt - b * swn) / sw)
    sse = float((w * (t - (a + b * n)) ** 2).sum())
    return a, b, sse


def segment(n: np.ndarray, t: np.ndarray, max_segments: int = MAX_SEGMENTS) -> list[tuple[int, int]]:
    """Breakpoints by dynamic programming: the contiguous split (each part >= MIN_POINTS sizes) that
    minimises the relative squared error. The fewest parts are kept whose relative RMS error is within
    GOOD_FIT_RMS, or within twice the best split's (measurement noise alone must not split a line)."""
    m = len(n)
    cost = {}
    for i in range(m):
        for j in range(i + MIN_POINTS, m + 1):
            cost[(i, j)] = weighted_line(n[i:j], t[i:j])[2]
    best_by_k = {}
    # dp[k][j]: best (sse, cuts) covering points [0, j) with k segments
    dp = [{0: (0.0, [])}]
    for k in range(1, max_segments + 1):
        layer = {}
        for j in range(k * MIN_POINTS, m + 1):
            options = [(prev[0] + cost[(i, j)], prev[1] + [(i, j)]) for i, prev in dp[k - 1].items()
                       if (i, j) in cost]
            if options:
                layer[j] = min(options, key=lambda o: o[0])
        dp.append(layer)
        if m in layer:
            best_by_k[k] = layer[m]
    if not best_by_k:
        return [(0, m)]

    rms = {k: math.sqrt(v[0] / m) for k, v in best_by_k.items()}
    good_enough = max(GOOD_FIT_RMS, 2 * min(rms.values()))
    k = min(k for k in rms if rms[k] <= good_enough)
    return best_by_k[k][1]


def _translate(a: float, b: float, model: CostModel) -> tuple[float, Optional[float]]:
    alpha_us = a / model.alpha_messages * 1e6
    bw = model.bytes_factor / b / 1e9 if b > 0 else None
    return alpha_us, bw


def fit_series(sizes: list[int], samples_us: list[list[float]], model: CostModel, seed: int = 0) -> dict:
    """Fit of one (op, impl, ranks) series. Returns the fit record (without the identifying keys)."""
    order = np.argsort(sizes)
    n = np.asarray(sizes, dtype=float)[order]
    samples = [np.asarray(samples_us[i], dtype=float) * 1e-6 for i in order]
    t = np.array([np.median(s) for s in samples])
    cuts = segment(n, t)
    rng = np.random.default_rng(seed)
    # Bootstrap: resample each size's iterations with replacement, BOOTSTRAP times at once.
    boot = np.stack([np.median(s[rng.integers(0, len(s), (BOOTSTRAP, len(s)))], axis=1) for s in samples], axis=1)
    segments = []
    fitted = np.empty_like(t)
    for i, j in cuts:
        a, b, sse = weighted_line(n[i:j], t[i:j])
        fitted[i:j] = a + b * n[i:j]
        w = 1.0 / np.maximum(t[i:j], 1e-15) ** 2
        mean = (w * t[i:j]).sum() / w.sum()
        sst = float((w * (t[i:j] - mean) ** 2).sum())
        alpha, bw = _translate(a, b, model)
        draws = [_translate(*weighted_line(n[i:j], bt[i:j])[:2], model) for bt in boot]
        alphas = [d[0] for d in draws]
        bws = [d[1] for d in draws if d[1] is not None]
        segments.append({
            "size_min": int(n[i]), "size_max": int(n[j - 1]), "points": j - i,
            "alpha_us": alpha, "bandwidth_gbps": bw,
            "alpha_us_ci": [float(np.percentile(alphas, 2.5)), float(np.percentile(alphas, 97.5))],
            "bandwidth_gbps_ci": ([float(np.percentile(bws, 2.5)), float(np.percentile(bws, 97.5))]
                                  if len(bws) == len(draws) else None),
            "r2": 1 - sse / sst if sst > 0 else 1.0,
        })
    rel = (t - fitted) / fitted
    mad = float(np.median(np.abs(rel - np.median(rel)))) * 1.4826
    limit = max(0.10, 3 * mad)
    outliers = [int(n[k]) for k in range(len(n)) if abs(rel[k]) > limit]
    # Latency is what the smallest messages pay, bandwidth what the largest reach: the segment of the
    # largest sizes is bandwidth-bound and its intercept says nothing about latency (it can be
    # negative, or thousands of microseconds on shared memory).
    low, top = segments[0], segments[-1]
    return {"model": model.name, "effective": model.effective,
            "alpha_us": low["alpha_us"], "alpha_us_ci": low["alpha_us_ci"],
            "alpha_segment": [low["size_min"], low["size_max"]],
            "bandwidth_gbps": top["bandwidth_gbps"], "bandwidth_gbps_ci": top["bandwidth_gbps_ci"],
            "bandwidth_segment": [top["size_min"], top["size_max"]],
            "segments": segments, "outlier_sizes": outliers}


def usable(r: dict) -> bool:
    """Empty messages and zero times say nothing about a line, nor fit a log axis."""
    return r["size_bytes"] > 0 and r["time_us"]["median"] > 0


def require_usable(doc: dict, source: str) -> None:
    """Refuses a result file that holds nothing to fit, plot or keep as a baseline."""
    if "numerics" in doc:
        raise CommbenchError(f"{source} is a numerics result (commbench numerics): it holds no timings to fit or "
                             f"keep as a baseline; 'commbench report', 'plot' and 'export' show it")
    if not doc["results"]:
        raise CommbenchError(f"{source} holds no measured rows (run status: {doc.get('status', 'unknown')})")
    if not any(usable(r) for r in doc["results"]):
        raise CommbenchError(f"{source} holds no usable series: every row has an empty message or a zero time")


def fit_records(records: list[dict]) -> list[dict]:
    """One fit per series in a run's records (see series_key); series with fewer than MIN_POINTS
    usable sizes, or on one rank, are reported with the reason instead."""
    series: dict = {}
    for r in filter(usable, records):
        series.setdefault(series_key(r), []).append(r)
    out = []
    for key, rows in series.items():
        head = series_head(key)
        op, impl, ranks = head["op"], head["impl"], head["ranks"]
        model = cost_model(op, impl, ranks)
        if model is None:
            out.append({**head, "skipped": "one rank: nothing crosses a link"})
        elif len(rows) < MIN_POINTS:
            out.append({**head, "skipped": f"{len(rows)} size(s): a fit needs at least {MIN_POINTS}"})
        else:
            # Without raw samples (a baseline saved without them, an import), the median stands alone.
            samples = [r["samples_us"] or [r["time_us"]["median"]] for r in rows]
            out.append({**head, **fit_series([r["size_bytes"] for r in rows], samples, model)})
    return out
