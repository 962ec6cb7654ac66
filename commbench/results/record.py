"""The record: one measured (or imported) size of one series, as the result file holds it. Runs,
importers and tests build records here alone, whole: a record is never changed after it is made,
and its dict form (as_dict) is what documents, formats and analyses read."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from ..collectives import bandwidths
from .stats import summarize


@dataclass(frozen=True)
class Record:
    op: str  # a collective, a p2p test (pingpong, bandwidth) or a copy (peer_copy, h2d, d2h, staged)
    impl: str
    dtype: str
    redop: str  # 'none' where nothing is reduced
    ranks: int
    size_bytes: int
    count: int
    iterations: int  # timed iterations (where an imported figure is an average: over how many)
    time_us: Mapping[str, float]  # statistics over the samples (stats.summarize)
    samples_us: tuple[float, ...]
    algbw_gbps: float
    busbw_gbps: Optional[float]  # None: one rank, nothing crosses a link
    wrong: int  # elements (bytes for p2p and copies) that arrived wrong in the untimed check
    # What some records carry besides: pair, window, bidirectional, root, agg, in_place, per_rank,
    # straggler, schedule (links), mode (copies), an importer's own fields.
    extra: Mapping[str, Any] = field(default_factory=dict)

    def but(self, **changes) -> Record:
        """A copy with some fields changed; names that are not fields go to `extra`."""
        own = {k: v for k, v in changes.items() if k in _FIELDS}
        more = {k: v for k, v in changes.items() if k not in _FIELDS}
        return dataclasses.replace(self, **own, extra={**self.extra, **more}) if more else dataclasses.replace(self, **own)

    def as_dict(self) -> dict:
        """The record as the result file's schema has it (and in that order)."""
        return {"op": self.op, "impl": self.impl, "dtype": self.dtype, "redop": self.redop, "ranks": self.ranks,
                "size_bytes": self.size_bytes, "count": self.count, "iterations": self.iterations,
                "time_us": dict(self.time_us), "algbw_gbps": self.algbw_gbps, "busbw_gbps": self.busbw_gbps,
                "wrong": self.wrong, "samples_us": list(self.samples_us), **self.extra}


_FIELDS = {f.name for f in dataclasses.fields(Record)} - {"extra"}


def measured(op: str, impl: str, dtype: str, redop: str, ranks: int, size: int, count: int,
             samples_s: np.ndarray, wrong: int, moved: int = 1, **extra) -> Record:
    """The record of timed iterations (seconds each): statistics, and algbw and busbw from the median;
    `moved` counts the directions that carry size bytes at once."""
    time_us = summarize(samples_s)
    algbw, busbw = bandwidths(op, size, time_us["median"] * 1e-6, ranks, moved)
    return Record(op, impl, dtype, redop, ranks, size, count, len(samples_s), time_us,
                  tuple(round(float(s) * 1e6, 4) for s in samples_s), algbw, busbw, int(wrong), extra)


def single(op: str, impl: str, dtype: str, redop: str, ranks: int, size: int, count: int, time_us: float,
           wrong: int, iterations: int = 1, spread: Optional[tuple[float, float]] = None, **extra) -> Record:
    """The record of one figure per size (what other tools' logs give, an average over `iterations`):
    every statistic is that figure, but min and max where the log gives them (`spread`)."""
    algbw, busbw = bandwidths(op, size, time_us * 1e-6, ranks)
    stats = {k: time_us for k in ("median", "mean", "min", "max", "p95", "p99")}
    stats.update(stdev=0.0, cv=0.0)
    if spread is not None:
        stats.update(min=spread[0], max=spread[1])
    return Record(op, impl, dtype, redop, ranks, size, count, iterations, stats, (time_us,), algbw, busbw, int(wrong),
                  extra)
