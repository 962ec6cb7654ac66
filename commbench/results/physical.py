"""The least time a GPU record's call can take: the bytes some rank's device must write, at the GPU's
peak memory bandwidth, plus a launch where anything is written. A median below it is no measurement but
a defect of commbench's timing (events recorded out of order, a call that never ran, which read
0.1-0.5 us at every size): every GPU run checks each record against it, so that such a defect fails
the run instead of passing as a figure."""

from __future__ import annotations

from typing import Optional

from ..collectives import PAIRWISE
from ..sizes import format_size

# A kernel or a copy between two events reads about 2 us on recent GPUs whatever it moves (the
# front end dispatches it and signals its end); half of that is a floor no GPU goes under.
LAUNCH_S = 1e-6
# CUDA events' resolution: a median this far below the floor may be the timer's rounding.
TIMER_S = 0.5e-6


class TimingDefect(RuntimeError):
    """A time no GPU can reach: the run fails midway (exit 1, the rows kept), not as bad input."""


def floor_s(record: dict, gbps: float) -> float:
    """A pair's message or copy is written whole on its receiving side; of a collective's, every rank
    together writes at least the size, so some rank writes at least its share; but one rank in place
    may write nothing (NCCL leaves its result where it is). Calls aggregated into one group (--agg N,
    a record's time per call) share its one launch: a call's part of it is 1/N."""
    ranks = max(record["ranks"], 1)
    if record["op"] in PAIRWISE:
        written = record["size_bytes"]
    elif ranks == 1 and record.get("in_place"):
        written = 0
    else:
        written = record["size_bytes"] / ranks
    return written / (gbps * 1e9) + (LAUNCH_S / record.get("agg", 1) if written else 0.0)


def check(record: dict, gbps: Optional[float]) -> None:
    """Raises where `record`'s median is below its floor on GPUs of `gbps` GB/s (None: unknown)."""
    if not gbps:
        return
    floor = floor_s(record, gbps)
    median_s = record["time_us"]["median"] * 1e-6
    if median_s < floor - TIMER_S:
        raise TimingDefect(
            f"{record['op']} {record['impl']} at {format_size(record['size_bytes'])}: a median of "
            f"{median_s * 1e6:.2f} us, below the {floor * 1e6:.2f} us its bytes take at the GPU's memory "
            f"bandwidth ({gbps:g} GB/s) plus a launch; the timing is wrong, a defect of commbench, not a figure "
            f"of the node")
