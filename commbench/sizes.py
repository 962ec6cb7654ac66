"""Message-size specifications: `1K-1G` (doubling), `8-256M:x4`, `1M-8M:+1M`, `8,1K,1M`.

Units are powers of 1024 (B, K, M, G, T); a size is the bytes of the buffer being reduced, as in
nccl-tests.
"""

from __future__ import annotations

import re

from .errors import CommbenchError

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
# ASCII digits alone: \d would take any script's (a full-width '１K').
_SIZE_RE = re.compile(r"^\s*([0-9]+)\s*([BKMGT]?)(?:I?B)?\s*$", re.IGNORECASE)
# Most sizes one sweep may have: far more than any useful sweep, and few enough to list at once
# (1-1T:+1 would name 10^12 sizes, and take all memory before one is measured).
MAX_SIZES = 10_000
# Digits a size may have: 10^24 bytes is beyond any memory, and far within what int() reads.
_MAX_DIGITS = 24


def parse_size(text: str, option: str = "") -> int:
    """`4K` -> 4096. Raises CommbenchError on anything that is not a whole byte count, naming the
    option it was given to."""
    m = _SIZE_RE.match(text)
    if not m:
        given = f" for {option}" if option else ""
        raise CommbenchError(f"bad size '{text}'{given}: expected a number with an optional unit B, K, M, G or T "
                             f"(e.g. 8, 1K, 256M)")
    digits = m.group(1).lstrip("0")
    if len(digits) > _MAX_DIGITS:  # Python refuses to read an int of more than 4,300 digits
        raise CommbenchError(f"bad size '{text[:24]}...'{' for ' + option if option else ''}: a number of "
                             f"{len(digits):,} digits is no byte count")
    return int(digits or "0") * _UNITS[m.group(2).upper()]


def parse_sizes(spec: str) -> list[int]:
    """Expands a size specification into the ascending list of distinct sizes it names."""
    if not spec or not spec.strip():
        raise CommbenchError("empty --sizes: give e.g. 1K-1G, 8-256M:x4, 1M-8M:+1M or 8,1K,1M")
    sizes: set[int] = set()
    for part in spec.split(","):
        sizes.update(_parse_part(part.strip(), spec))
    _check_count(len(sizes), f"--sizes '{spec}'")
    return sorted(sizes)


def _check_count(count: int, where: str) -> None:
    if count > MAX_SIZES:
        raise CommbenchError(f"too many sizes: {where} names {count} sizes, more than the {MAX_SIZES} a sweep may "
                             f"have; use a larger step")


def _parse_part(part: str, spec: str) -> list[int]:
    if "-" not in part:
        return [parse_size(part, "--sizes")]
    range_text, _, step_text = part.partition(":")
    lo_text, _, hi_text = range_text.partition("-")
    if not lo_text.strip() or not hi_text.strip():
        # '-5' reads as a range without a start: name what was typed, not the empty start.
        raise CommbenchError(f"bad size '{part}' in --sizes '{spec}': sizes are byte counts, never negative, "
                             f"and a range needs both ends (e.g. 1K-1G)")
    lo, hi = parse_size(lo_text, "--sizes"), parse_size(hi_text, "--sizes")
    if lo > hi:
        raise CommbenchError(f"bad size range '{part}' in --sizes '{spec}': the start exceeds the end")
    step_text = step_text.strip() or "x2"
    if step_text[0] in "xX*":
        digits = step_text[1:]
        # ASCII digits alone, as a size takes them: int() took "２" (full-width) and "1_0" too.
        factor = int(digits) if digits.isascii() and digits.isdigit() and len(digits) <= _MAX_DIGITS else 0
        if factor < 2:
            raise CommbenchError(f"bad step '{step_text}' in --sizes '{spec}': a factor must be an integer >= 2 (e.g. :x4)")
        if lo == 0:
            raise CommbenchError(f"bad size range '{part}': a multiplicative range cannot start at 0")
        out, s = [], lo
        while s <= hi:
            out.append(s)
            s *= factor
        return out
    if step_text[0] == "+":
        inc = parse_size(step_text[1:], "--sizes")
        if inc <= 0:
            raise CommbenchError(f"bad step '{step_text}' in --sizes '{spec}': an increment must be positive")
        _check_count((hi - lo) // inc + 1, f"'{part}' in --sizes '{spec}'")
        return list(range(lo, hi + 1, inc))
    raise CommbenchError(f"bad step '{step_text}' in --sizes '{spec}': use :xN (multiply) or :+SIZE (add)")


def format_size(n: int) -> str:
    """Human size with the largest exact unit: 1048576 -> '1M', 1536 -> '1536'."""
    for unit in ("T", "G", "M", "K"):
        if n and n % _UNITS[unit] == 0:
            return f"{n // _UNITS[unit]}{unit}"
    return str(n)


def round_to_itemsize(sizes: list[int], itemsize: int, dtype: str) -> tuple[list[int], list[str]]:
    """Rounds each size down to whole elements; returns the distinct sizes and a note per change. A
    size between 0 and one element is refused: it would be measured as 0 bytes."""
    out: list[int] = []
    notes: list[str] = []
    for s in sizes:
        if 0 < s < itemsize:
            raise CommbenchError(f"size {s} B in --sizes is smaller than one {dtype} element ({itemsize} B): "
                                 f"give 0 or at least {itemsize}")
        r = (s // itemsize) * itemsize
        if r != s:
            notes.append(f"size {s} B rounded to {r} B ({r // itemsize} elements of {itemsize} B)")
        if r not in out:
            out.append(r)
    if out == [0]:
        # An empty message may join a sweep (its time is the call's own cost, as nccl-tests' -b 0
        # gives), but alone it moves and checks nothing, and no cost model is fitted to it.
        raise CommbenchError(f"--sizes names only empty messages: give one size of at least {itemsize} B (one "
                             f"{dtype} element); 0 may join a sweep")
    return out, notes
