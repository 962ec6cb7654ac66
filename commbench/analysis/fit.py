"""Latency-bandwidth fits: t(n) = a + b n by weighted least squares on the per-size medians, with
automatic segmentation (libraries switch protocols by size), translated into per-message alpha and
link bandwidth through the cost model of the algorithm that ran (DESIGN: ring 2(p-1) steps, tree,
Hockney for point-to-point)."""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

import numpy as np

from ..collectives import cost_model
from ..collectives.cost import CostModel
from ..errors import CommbenchError
from ..results.memo import for_the_last_records
from ..results.series import series_head, series_key

MAX_SEGMENTS = 3
MIN_POINTS = 3  # per segment
GOOD_FIT_RMS = 0.03  # relative RMS error under which a line needs no further split
BOOTSTRAP = 200
# Resampled positions drawn at once by the bootstrap (1 to 4 bytes each).
_BLOCK_VALUES = 16_000_000


def weighted_line(n: np.ndarray, t: np.ndarray) -> tuple:
    """(a, b, weighted SSE) of t = a + b n with weights 1/t^2, i.e. least relative error, along the
    last axis: one line per row of t (series, the bootstrap's draws), n broadcast against t."""
    w = 1.0 / np.maximum(t, 1e-15) ** 2
    sw, swn, swt = w.sum(-1), (w * n).sum(-1), (w * t).sum(-1)
    swnn, swnt = (w * n * n).sum(-1), (w * n * t).sum(-1)
    det = sw * swnn - swn * swn
    flat = (np.abs(det) < 1e-300 * np.maximum(sw * swnn, 1e-300)) | (n.shape[-1] < 2)
    b = np.where(flat, 0.0, (sw * swnt - swn * swt) / np.where(flat, 1.0, det))
    a = (swt - b * swn) / sw
    sse = (w * (t - (a[..., None] + b[..., None] * n)) ** 2).sum(-1)
    return a, b, sse


# Where a series may be split: between any two sizes of an ordinary sweep; a longer series (a long
# imported log) at this many evenly spread places, so that the split costs O(places^2), not O(sizes^3).
MAX_BOUNDARIES = 128


def _split_costs(n: np.ndarray, t: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """cost[..., p, q]: the weighted SSE of weighted_line over points [bounds[p], bounds[q]) of each
    series (rows of n and t), from prefix sums of the weighted moments (every segment in O(1)); inf
    where the part has too few points."""
    w = 1.0 / np.maximum(t, 1e-15) ** 2

    def prefix(x):
        return np.concatenate([np.zeros(x.shape[:-1] + (1,)), np.cumsum(x, axis=-1)], axis=-1)[..., bounds]
    sums = [prefix(x) for x in (w, w * n, w * t, w * n * n, w * n * t, w * t * t)]
    sw, swn, swt, swnn, swnt, swtt = (s[..., None, :] - s[..., :, None] for s in sums)
    count = bounds[None, :] - bounds[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        det = sw * swnn - swn * swn
        flat = (np.abs(det) < 1e-300 * np.maximum(sw * swnn, 1e-300)) | (count < 2)
        b = np.where(flat, 0.0, (sw * swnt - swn * swt) / np.where(flat, 1.0, det))
        a = np.where(sw > 0, (swt - b * swn) / np.where(sw > 0, sw, 1.0), 0.0)
        sse = swtt - 2 * a * swt - 2 * b * swnt + a * a * sw + 2 * a * b * swn + b * b * swnn
    return np.where(count >= MIN_POINTS, np.maximum(sse, 0.0), np.inf)


def segment(n: np.ndarray, t: np.ndarray, max_segments: int = MAX_SEGMENTS) -> list[list[tuple[int, int]]]:
    """Breakpoints of each series (rows of n and t, sizes ascending) by dynamic programming: the
    contiguous split (each part >= MIN_POINTS sizes) that minimises the relative squared error. The
    fewest parts are kept whose relative RMS error is within GOOD_FIT_RMS, or within twice the best
    split's (measurement noise alone must not split a line)."""
    count, m = t.shape
    bounds = (np.arange(m + 1) if m <= MAX_BOUNDARIES
              else np.unique(np.linspace(0, m, MAX_BOUNDARIES + 1).round().astype(int)))
    cost = _split_costs(np.asarray(n, dtype=np.float64), np.asarray(t, dtype=np.float64), bounds)
    last = len(bounds) - 1
    best = np.full((count, len(bounds)), np.inf)
    best[:, 0] = 0.0
    came: list[np.ndarray] = []  # per part count: for each series and end, where its last part starts
    finals = []  # per part count: each series' least error
    for _ in range(max_segments):
        total = best[:, :, None] + cost  # [series, start, end]
        came.append(np.argmin(total, axis=1))
        best = np.take_along_axis(total, came[-1][:, None, :], axis=1)[:, 0, :]
        finals.append(best[:, last])
    rms = np.sqrt(np.stack(finals, axis=1) / m)  # [series, parts - 1]; inf where no split exists
    good_enough = np.maximum(GOOD_FIT_RMS, 2 * rms.min(axis=1))
    parts = np.argmax(rms <= good_enough[:, None], axis=1) + 1
    out = []
    for row in range(count):
        if not np.isfinite(rms[row]).any():
            out.append([(0, m)])
            continue
        cuts, end = [], last
        for part in range(int(parts[row]), 0, -1):
            start = int(came[part - 1][row, end])
            cuts.append((int(bounds[start]), int(bounds[end])))
            end = start
        out.append(cuts[::-1])
    return out


def _translate(a, b, messages, bytes_factor) -> tuple:
    """(alpha in us, link GB/s; NaN where the slope is not positive) of lines t = a + b n, through a
    cost model's messages per call and bytes factor (CostModel; arrays broadcast against a and b)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return a / messages * 1e6, np.where(b > 0, bytes_factor / b / 1e9, np.nan)


# Up to this many iterations a size's resampled medians come from the exact distribution of a
# resample's middle order statistics, tabulated (one draw each); above it, from their Beta laws.
_EXACT_K = 64


@lru_cache(maxsize=None)
def _middle_of_resamples(k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lower, upper, cumulative probability): every pair of sorted positions that the middle of a
    resample of k values (k drawn with replacement from k) can sit at, and its exact probability.
    N_j, the draws at or below position j, is binomial(k, (j + 1) / k); for odd k the middle is the
    m-th smallest (m = (k + 1) / 2), below or at j when N_j >= m; for even k it is the pair of the m-th
    and (m + 1)-th (m = k / 2), at or below a and b (a <= b) when N_a >= m and N_b > m: P(N_a >= m)
    less P(N_a = N_b = m)."""
    p = (np.arange(k) + 1) / k

    def pmf(i: int, q: np.ndarray) -> np.ndarray:
        return math.comb(k, i) * q ** i * (1 - q) ** (k - i)
    if k % 2:
        m = (k + 1) // 2
        cdf = sum(pmf(i, p) for i in range(m, k + 1))
        prob = np.diff(cdf, prepend=0.0)
        lower = upper = np.arange(k)
    else:
        m = k // 2
        at_least = sum(pmf(i, p) for i in range(m, k + 1))  # P(N_j >= m), by j
        a, b = np.meshgrid(np.arange(k), np.arange(k), indexing="ij")
        low = np.minimum(a, b)  # F(a, b) = F(b, b) past the diagonal
        joint = at_least[low] - math.comb(k, m) * p[low] ** m * (1 - p[b]) ** (k - m)
        padded = np.pad(joint, ((1, 0), (1, 0)))
        prob = (padded[1:, 1:] - padded[:-1, 1:] - padded[1:, :-1] + padded[:-1, :-1]).ravel()
        lower, upper = a.ravel(), b.ravel()
    keep = prob > 0
    return lower[keep], upper[keep], np.cumsum(prob[keep])


def _middle_positions(k: int, shape: tuple, rng) -> tuple[np.ndarray, np.ndarray]:
    """The sorted positions of the middle of resamples of k values (k drawn with replacement), drawn
    straight from their distribution rather than by drawing and ordering k positions each (which took
    30 s for 10,000 sizes of 2,000 iterations). A drawn position is floor(k U) of a uniform U, and
    floor is monotone, so the m-th smallest position is floor(k U_(m)), U_(m) the m-th smallest of k
    uniforms: Beta(m, k - m + 1). Given it, the other k - m lie uniformly above it, and the next one
    up is U_(m) + (1 - U_(m)) Beta(1, k - m)."""
    m = (k - 1) // 2 + 1
    first = rng.beta(m, k - m + 1, shape)
    second = first if k % 2 else first + (1 - first) * rng.beta(1, k - m, shape)
    return (np.minimum((k * first).astype(np.intp), k - 1), np.minimum((k * second).astype(np.intp), k - 1))


def _medians(samples: list[np.ndarray], rng) -> tuple[np.ndarray, np.ndarray]:
    """Each size's median, and (BOOTSTRAP, sizes) medians of its iterations resampled with
    replacement. Sizes with as many iterations are taken together, a bounded block at a time (one
    NumPy call per size cost 8 s for 100,000 sizes)."""
    t, boot = np.empty(len(samples)), np.empty((BOOTSTRAP, len(samples)))
    by_count: dict[int, list[int]] = {}
    for i, s in enumerate(samples):
        by_count.setdefault(len(s), []).append(i)
    for k, sizes in by_count.items():
        lo, hi = (k - 1) // 2, k // 2  # the middle position(s) of k sorted values
        exact = k <= _EXACT_K
        step = max(1, _BLOCK_VALUES // (BOOTSTRAP + k))  # a block's values and its draws
        for at in range(0, len(sizes), step):
            block = sizes[at:at + step]
            values = np.sort(np.stack([samples[i] for i in block]), axis=1)  # (sizes, k)
            t[block] = (values[:, lo] + values[:, hi]) / 2
            if exact:
                lower, upper, cdf = _middle_of_resamples(k)
                pick = np.minimum(np.searchsorted(cdf, rng.random((len(block), BOOTSTRAP)) * cdf[-1], side="right"),
                                  len(cdf) - 1)
                low = np.take_along_axis(values, lower[pick], axis=1)
                high = low if k % 2 else np.take_along_axis(values, upper[pick], axis=1)
            else:
                low_at, high_at = _middle_positions(k, (len(block), BOOTSTRAP), rng)
                low = np.take_along_axis(values, low_at, axis=1)
                high = np.take_along_axis(values, high_at, axis=1)
            boot[:, block] = ((low + high) / 2).T
    return t, boot


# Values (rows times sizes) of the segments' lines fitted at once, bounding the temporaries.
_LINE_BLOCK = 4_000_000


def _segment_lines(n: np.ndarray, t: np.ndarray, boot: np.ndarray, segs: np.ndarray) -> tuple:
    """(a, b, weighted SSE), each (segments, 1 + BOOTSTRAP), of each segment's line through the medians
    (column 0) and through each bootstrap draw's; segs holds (series, first size, end) rows of the
    series in n, t (series, sizes) and boot (series, BOOTSTRAP, sizes). Segments of one length are
    fitted together, a block at a time (one NumPy call per segment cost seconds for a fleet's file)."""
    out = [np.empty((len(segs), 1 + boot.shape[1])) for _ in range(3)]
    lengths = segs[:, 2] - segs[:, 1]
    draws = np.arange(boot.shape[1])[None, :, None]
    for length in np.unique(lengths):
        same = np.flatnonzero(lengths == length)
        step = max(1, _LINE_BLOCK // (boot.shape[1] * length))
        for at in range(0, len(same), step):
            rows = same[at:at + step]
            series, first = segs[rows, 0], segs[rows, 1]
            cols = first[:, None] + np.arange(length)
            sizes = n[series[:, None], cols]
            # one long segment (a long imported log) is read in place, not copied
            drawn = (boot[series[0], None, :, first[0]:first[0] + length] if len(rows) == 1
                     else boot[series[:, None, None], draws, cols[:, None, :]])
            for column, line in ((slice(0, 1), weighted_line(sizes, t[series[:, None], cols])),
                                 (slice(1, None), weighted_line(sizes[:, None, :], drawn))):
                for whole, part in zip(out, line):
                    whole[rows, column] = part.reshape(len(rows), -1)
    return tuple(out)


def _fit_group(n: np.ndarray, t: np.ndarray, boot: np.ndarray, models: list[CostModel]) -> list[dict]:
    """Fits of series of as many sizes (rows of n, their sizes in bytes ascending), from their median
    times in seconds t and the bootstrap's medians boot (series, BOOTSTRAP, sizes; _medians), through
    each one's cost model. Returns the fit records (without the identifying keys)."""
    cuts = segment(n, t)
    segs = np.array([(row, i, j) for row, parts in enumerate(cuts) for i, j in parts], dtype=np.intp).reshape(-1, 3)
    a, b, sse = _segment_lines(n, t, boot, segs)
    messages = np.array([[models[row].alpha_messages] for row in segs[:, 0]])
    factors = np.array([[models[row].bytes_factor] for row in segs[:, 0]])
    alphas, bws = _translate(a, b, messages, factors)
    ci = np.percentile(np.stack([alphas[:, 1:], bws[:, 1:]]), [2.5, 97.5], axis=-1)  # [bound, alpha|bw, segment]
    no_bw_ci = np.isnan(bws[:, 1:]).any(axis=1)
    fitted = np.empty_like(t)
    segments: list[list[dict]] = [[] for _ in cuts]
    for k, (row, i, j) in enumerate(segs.tolist()):
        fitted[row, i:j] = a[k, 0] + b[k, 0] * n[row, i:j]
        w = 1.0 / np.maximum(t[row, i:j], 1e-15) ** 2
        mean = (w * t[row, i:j]).sum() / w.sum()
        sst = float((w * (t[row, i:j] - mean) ** 2).sum())
        bw = float(bws[k, 0])
        segments[row].append({
            "size_min": int(n[row, i]), "size_max": int(n[row, j - 1]), "points": j - i,
            "alpha_us": float(alphas[k, 0]), "bandwidth_gbps": None if np.isnan(bw) else bw,
            "alpha_us_ci": [float(ci[0, 0, k]), float(ci[1, 0, k])],
            "bandwidth_gbps_ci": None if no_bw_ci[k] else [float(ci[0, 1, k]), float(ci[1, 1, k])],
            "r2": 1 - float(sse[k, 0]) / sst if sst > 0 else 1.0,
        })
    with np.errstate(divide="ignore", invalid="ignore"):  # a fitted line through 0 at a size: no warning
        rel = (t - fitted) / fitted
    mad = np.median(np.abs(rel - np.median(rel, axis=1, keepdims=True)), axis=1) * 1.4826
    limit = np.maximum(0.10, 3 * mad)
    out = []
    for row, parts in enumerate(segments):
        # Latency is what the smallest messages pay, bandwidth what the largest reach: the segment of
        # the largest sizes is bandwidth-bound and its intercept says nothing about latency (it can
        # be negative, or thousands of microseconds on shared memory).
        low, top, model = parts[0], parts[-1], models[row]
        out.append({"model": model.name, "effective": model.effective,
                    "alpha_us": low["alpha_us"], "alpha_us_ci": low["alpha_us_ci"],
                    "alpha_segment": [low["size_min"], low["size_max"]],
                    "bandwidth_gbps": top["bandwidth_gbps"], "bandwidth_gbps_ci": top["bandwidth_gbps_ci"],
                    "bandwidth_segment": [top["size_min"], top["size_max"]],
                    "segments": parts, "outlier_sizes": [int(x) for x in n[row][np.abs(rel[row]) > limit[row]]]})
    return out


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
    usable sizes, or on one rank, are reported with the reason instead. Each call returns dicts of
    its own (callers add verdicts to them)."""
    # Times near the float range's end (a file's samples of 1e308 us) overflow the weights' squares:
    # the weight is 0 then, as it should be, and numpy's warnings would be lines of noise on stderr.
    with np.errstate(over="ignore", invalid="ignore"):
        return [dict(f) for f in _fit_records(records)]


@for_the_last_records
def _fit_records(records: list[dict]) -> list[dict]:
    series: dict = {}
    for r in filter(usable, records):
        series.setdefault(series_key(r), []).append(r)
    out, fits = [], []
    for key, rows in series.items():
        head = series_head(key)
        op, impl, ranks = head["op"], head["impl"], head["ranks"]
        model = cost_model(op, impl, ranks)
        if model is None:
            out.append({**head, "skipped": "one rank: nothing crosses a link"})
        elif len(rows) < MIN_POINTS:
            out.append({**head, "skipped": f"{len(rows)} size(s): a fit needs at least {MIN_POINTS}"})
        else:
            out.append(head)
            fits.append((head, model, sorted(rows, key=lambda r: r["size_bytes"])))
    # Every series' medians at once (a fleet's file holds thousands of series), those of as many sizes
    # side by side, to be fitted together; the bootstrap's draws come from one seeded generator, so a
    # file fits the same every time. Without raw samples (a baseline saved without them, an import),
    # the median stands alone.
    fits.sort(key=lambda fit: len(fit[2]))
    t, boot = _medians([np.asarray(r["samples_us"] or [r["time_us"]["median"]], dtype=float) * 1e-6
                        for _, _, rows in fits for r in rows], np.random.default_rng(0))
    at = 0
    for length, group in itertools.groupby(fits, key=lambda fit: len(fit[2])):
        group = list(group)
        part = slice(at, at + length * len(group))
        n = np.array([[r["size_bytes"] for r in rows] for _, _, rows in group], dtype=float)
        fitted = _fit_group(n, t[part].reshape(len(group), length),
                            boot[:, part].reshape(BOOTSTRAP, len(group), length).transpose(1, 0, 2),
                            [model for _, model, _ in group])
        for (head, _, _), f in zip(group, fitted):
            head.update(f)
        at = part.stop
    return out
