"""Series: which records of a result belong to one line of measurements (same op, impl, ranks,
dtype, reduction, pair, direction, placement, links schedule and round, copy mode), for fits,
comparisons, plots and every format that shows series apart, and how a series is named."""

from __future__ import annotations

from .nccl_knobs import fields, forced_text

# A host-level links run measures a suspect host pair again in several rounds: each round's rows are
# a series of their own.
SERIES_FIELDS = ("op", "impl", "ranks", "dtype", "redop", "pair", "bidirectional", "in_place", "schedule", "round",
                 "mode", *fields())


def series_key(r: dict) -> tuple:
    """What makes records one series, for fits, comparisons and plots alike (lists, a pair's ranks,
    as tuples). Asked several times of every record of a file: the common case, no list, is the quick one."""
    key = tuple(map(r.get, SERIES_FIELDS))
    return tuple(tuple(v) if type(v) is list else v for v in key) if list in map(type, key) else key


def series_head(key: tuple) -> dict:
    return {f: (list(v) if isinstance(v, tuple) else v) for f, v in zip(SERIES_FIELDS, key) if v is not None}


def by_series(records: list[dict]) -> dict[tuple, list[dict]]:
    """Series (series_key) in the order they first appear, each one's records by size."""
    out: dict[tuple, list[dict]] = {}
    for r in records:
        out.setdefault(series_key(r), []).append(r)
    return {k: sorted(v, key=lambda r: r["size_bytes"]) for k, v in out.items()}


def where(key: tuple) -> str:
    """'4 ranks', 'pair 0-1', 'pair 0-1, both ways'."""
    h = series_head(key)
    return (f"pair {h['pair'][0]}-{h['pair'][1]}" if "pair" in h else f"{h['ranks']} ranks") + \
        (", both ways" if h.get("bidirectional") else "")


def variant(h: dict) -> str:
    """The impl of a record or series head, and what sets its records apart from the impl's plain
    ones: 'ring@mpi', 'nccl in-place', 'mpi loaded' (links' clean schedule is the plain one), 'cuda ce',
    'nccl algo=ring proto=simple' (NCCL's choice forced)."""
    return " ".join([h["impl"]] + (["in-place"] if h.get("in_place") else [])
                    + ([h["schedule"]] if h.get("schedule", "clean") != "clean" else [])
                    + ([h["mode"]] if h.get("mode") else [])
                    + ([forced_text(h)] if forced_text(h) else []))


def label(key: tuple) -> str:
    """'allreduce ring@mpi (4 ranks)', 'allreduce nccl in-place (8 ranks)', 'pingpong mpi loaded (pair
    0-1)', 'peer_copy cuda ce (pair 0-1, both ways)'."""
    h = series_head(key)
    return f"{h['op']} {variant(h)} ({where(key)})"
