"""Numerics of a reduction: the data, the exact reference and the error figures of `commbench
numerics`. Pure functions of numpy arrays: nothing here needs ranks.

The data is a global batch of C contributions (one per rank at the largest rank count). Every value
is a function of (seed, contribution index, element index) alone, built from the raw 64-bit output of
numpy's PCG64 bit generator (whose stream numpy keeps stable across releases) with IEEE additions and
multiplications only (correctly rounded on every host), so any host draws the same bits:
- stream(seed, c, tag) = PCG64(SeedSequence([seed, c, tag])); element i takes draws k*i .. k*i+k-1
  (k draws per element); a draw r becomes u = (r >> 11) * 2**-53, uniform in [0, 1);
- normal: u1 + u2 + ... + u12 - 6 (Irwin-Hall, summed left to right; mean 0, variance 1), times
  0.625**((i // 1024) % 16) in one rounded product: buckets of 1024 elements ("layers") whose scales
  span three orders of magnitude (1 .. 8.7e-4), with full float64 significands;
- uniform: 2u - 1;
- cancel: (-1)**c * L + S with L = 2**12 * (1 + u) from stream(seed, c // 2, 1) and S = 2u - 1:
  contributions 2j and 2j + 1 carry the same large value with opposite signs, so the total is the
  sum of the small values, and every rounding of a partial sum that holds L loses part of it;
- integer: r % 5 - 2, integers in [-2, 2]: every partial sum of up to 128 contributions is exact in
  every dtype (bfloat16 holds the integers up to 256).
A contribution enters a reduction rounded once to the dtype (round_to).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

import numpy as np

DATA = ("normal", "uniform", "cancel", "integer")
BUCKET = 1024  # elements per scale bucket of the normal data
# Its buckets' scales 0.625**k = 5**k / 8**k, exact in float64.
SCALES = np.array([5**k / 8**k for k in range(16)])
_DRAWS = {"normal": 12, "uniform": 1, "cancel": 1, "integer": 1}
_BLOCK = 1 << 16  # elements generated at once: bounds the raw draws held in memory


@dataclass(frozen=True)
class Format:
    """An IEEE-style binary floating-point format: significand bits (with the implicit one) and the
    exponents of its smallest and largest normal binades."""
    bits: int
    emin: int
    emax: int

    @property
    def largest(self) -> float:
        return math.ldexp(2 - math.ldexp(1, 1 - self.bits), self.emax)


FORMATS = {
    "float32": Format(24, -126, 127),
    "float16": Format(11, -14, 15),
    "bfloat16": Format(8, -126, 127),
    "float64": Format(53, -1022, 1023),
}


def _stream(seed: int, index: int, tag: int) -> np.random.PCG64:
    return np.random.PCG64(np.random.SeedSequence([seed, index, tag]))


def _uniform(raw: np.ndarray) -> np.ndarray:
    return (raw >> np.uint64(11)).astype(np.float64) * 2.0**-53


def _draws(stream: np.random.PCG64, n: int, k: int) -> np.ndarray:
    """The raw draws of the stream's next n elements, k per element, as an (n, k) array."""
    return stream.random_raw(n * k).reshape(n, k)


def contribution(data: str, seed: int, index: int, count: int) -> np.ndarray:
    """Contribution `index` of the global batch: `count` float64 values (see the module's text)."""
    stream = _stream(seed, index, 0)
    large = _stream(seed, index // 2, 1) if data == "cancel" else None
    out = np.empty(count, dtype=np.float64)
    for first in range(0, count, _BLOCK):
        n = min(_BLOCK, count - first)
        raw = _draws(stream, n, _DRAWS[data])
        if data == "integer":
            out[first:first + n] = (raw[:, 0] % np.uint64(5)).astype(np.float64) - 2
            continue
        u = _uniform(raw)
        if data == "normal":
            z = u[:, 0]
            for j in range(1, u.shape[1]):
                z = z + u[:, j]
            out[first:first + n] = (z - 6) * SCALES[(np.arange(first, first + n) // BUCKET) % len(SCALES)]
        elif data == "uniform":
            out[first:first + n] = 2 * u[:, 0] - 1
        else:
            big = 2.0**12 * (1 + _uniform(_draws(large, n, 1))[:, 0])
            out[first:first + n] = (-big if index % 2 else big) + (2 * u[:, 0] - 1)
    return out


def shares(contributions: int, ranks: int) -> list[range]:
    """The contributions each of `ranks` ranks sums locally: consecutive blocks, as even as the
    numbers allow."""
    return [range(r * contributions // ranks, (r + 1) * contributions // ranks) for r in range(ranks)]


def _ulp_exponent(x: np.ndarray, fmt: Format) -> np.ndarray:
    """The exponent of the unit in the last place of fmt at x: of x's binade, or of the subnormal
    spacing below the smallest normal binade (zero included)."""
    binade = np.frexp(x)[1] - 1
    binade = np.where(x == 0, fmt.emin, binade)
    return np.maximum(binade, fmt.emin) - (fmt.bits - 1)


def ulp(x, dtype: str) -> np.ndarray:
    """The spacing of dtype's values at x (a value of dtype)."""
    x = np.asarray(x, dtype=np.float64)
    return np.ldexp(1.0, _ulp_exponent(x, FORMATS[dtype]))


def _overflow(y: np.ndarray, fmt: Format) -> np.ndarray:
    """Rounded magnitudes beyond the largest value become infinities, as IEEE rounding does."""
    big = np.abs(y) > fmt.largest
    if big.any():
        y[big] = np.copysign(np.inf, y[big])
    return y


def round_to(x, dtype: str) -> np.ndarray:
    """float64 values rounded once, to nearest with ties to even, to dtype's values (held in float64).
    Scaling by a power of two and np.rint are exact, so this is one correct rounding."""
    return _round_split(np.asarray(x, dtype=np.float64), 0.0, dtype)


def _round_split(hi: np.ndarray, lo, dtype: str) -> np.ndarray:
    """hi + lo rounded once to dtype, where hi = hi + lo rounded to float64 (so |lo| is at most half
    a float64 unit of hi). Rounding hi alone is right except where hi lies exactly halfway between
    two values of dtype: there the sign of lo says on which side the exact value lies."""
    fmt = FORMATS[dtype]
    if fmt.bits == 53:
        return hi.copy()
    k = _ulp_exponent(hi, fmt)
    q = np.ldexp(hi, -k)  # hi in units of dtype's last place: exact
    units = np.rint(q)
    below = np.floor(q)
    units = np.where((q - below == 0.5) & (np.asarray(lo) != 0), below + (np.asarray(lo) > 0), units)
    return _overflow(np.ldexp(units, k), fmt)


def _two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a + b rounded, its rounding error), exactly (Knuth)."""
    s = a + b
    back = s - a
    return s, (a - (s - back)) + (b - back)


def correctly_rounded_sum(values: Sequence[float], dtype: str) -> float:
    """The exact sum of float64 `values` rounded once to dtype. math.fsum gives the correctly rounded
    float64 sum; rounding that again to a narrower dtype is right unless it lies exactly halfway
    between two values of dtype, where the exact remainder (fractions.Fraction) decides."""
    hi = math.fsum(values)
    if FORMATS[dtype].bits == 53 or not math.isfinite(hi):
        return hi
    lo = float(sum(map(Fraction, values), Fraction(0)) - Fraction(hi))
    return float(_round_split(np.array([hi]), np.array([lo]), dtype)[0])


def reference(inputs: np.ndarray, dtype: str) -> np.ndarray:
    """Per element (column) of a (contributions, count) array of dtype's values, the correctly
    rounded sum in dtype. Vectorised with error-free additions: the recursive float64 sum s, the
    rounding error of each of its steps, their sum t, and hi + lo = s + t split as _round_split takes
    it. Where summing the errors rounded too (t not exact), the column is summed exactly on its own."""
    s = inputs[0].copy()
    t = np.zeros_like(s)
    exact = np.ones(s.shape, dtype=bool)
    for x in inputs[1:]:
        s, e = _two_sum(s, x)
        t, e = _two_sum(t, e)
        exact &= e == 0
    out = _round_split(*_two_sum(s, t), dtype)
    inexact = np.flatnonzero(~exact)
    out[inexact] = [correctly_rounded_sum(col, dtype) for col in inputs[:, inexact].T.tolist()]
    return out


_CAP = np.finfo(np.float64).max  # a ratio beyond float64 is recorded as this


def errors(result: np.ndarray, ref: np.ndarray, abs_sum: np.ndarray, dtype: str) -> dict:
    """The error figures of a reduced vector against the correctly rounded sums `ref`, with `abs_sum`
    the sums of the contributions' magnitudes:
    - relative errors |error| / |ref| and errors in units of ref's last place, over the elements whose
      sum is not zero (an exact zero has no relative error, and the spacing of dtype there is
      astronomically fine);
    - the largest |error| / (u * abs_sum), u = 2**-bits the dtype's unit roundoff, whatever the
      cancellation: C contributions added in any order stay within C - 1 of the exact sum (Jeannerod
      and Rump), so within C of its correct rounding;
    - the share of elements that differ from ref (+0 and -0 count as equal), and the elements that
      are infinite or NaN where ref is not (left out of the other figures)."""
    same = result == ref
    finite = np.isfinite(result) & np.isfinite(ref)
    err = np.where(same | ~finite, 0.0, np.abs(result - ref))
    nonzero = ref != 0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        rel = np.minimum(err[nonzero] / np.abs(ref[nonzero]), _CAP)
        ulps = np.minimum(err[nonzero] / ulp(ref[nonzero], dtype), _CAP)
        scaled = np.minimum(err[abs_sum > 0] / abs_sum[abs_sum > 0] * 2.0**FORMATS[dtype].bits, _CAP)
    return {"max_rel_error": float(rel.max(initial=0.0)), "mean_rel_error": float(rel.mean()) if rel.size else 0.0,
            "max_ulps": float(ulps.max(initial=0.0)), "max_error_u_abs_sum": float(scaled.max(initial=0.0)),
            "not_correctly_rounded": float(np.mean(~same)), "nonfinite": int(np.count_nonzero(~same & ~finite))}


def drift(result: np.ndarray, first: np.ndarray, ref: np.ndarray) -> float:
    """The largest difference between the reduced vector and the one at the smallest rank count,
    relative to the correctly rounded sum `ref` (elements whose sum is not zero, both vectors finite)."""
    keep = (ref != 0) & np.isfinite(result) & np.isfinite(first)
    with np.errstate(over="ignore"):
        rel = np.minimum(np.abs(result[keep] - first[keep]) / np.abs(ref[keep]), _CAP)
    return float(rel.max(initial=0.0))
