"""Not a format: the records of a result file grouped into series and named, for every format that
shows series apart (the console table's blocks, the report's tables, the plot's legend)."""

from __future__ import annotations

from ..fit import series_head, series_key


def by_series(records: list[dict]) -> dict[tuple, list[dict]]:
    """Series (fit.series_key) in the order they first appear, each one's records by size."""
    out: dict[tuple, list[dict]] = {}
    for r in records:
        out.setdefault(series_key(r), []).append(r)
    return {k: sorted(v, key=lambda r: r["size_bytes"]) for k, v in out.items()}


def where(key: tuple) -> str:
    """'4 ranks', 'pair 0-1', 'pair 0-1, both ways'."""
    h = series_head(key)
    return (f"pair {h['pair'][0]}-{h['pair'][1]}" if "pair" in h else f"{h['ranks']} ranks") + \
        (", both ways" if h.get("bidirectional") else "")


def label(key: tuple) -> str:
    """'allreduce ring (4 ranks)', 'peer_copy ce (pair 0-1, both ways)'."""
    h = series_head(key)
    return f"{h['op']} {h['impl']} ({where(key)})"
