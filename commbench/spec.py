"""What is measured: dtypes, reduction ops and per-collective specs (nccl-tests' hook table).

The bus-bandwidth factors follow nccl-tests' doc/PERFORMANCE.md: busbw = algbw * factor(p), chosen so
that busbw is comparable to the link bandwidth whatever the number of ranks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from .errors import CommbenchError

# Bytes per element of each dtype a sweep takes. torch's dtypes are looked up only where buffers are
# made: importing torch costs seconds, which a command that starts ranks or reads files need not pay.
DTYPES: dict[str, int] = {
    "float32": 4,
    "float64": 8,
    "float16": 2,
    "bfloat16": 2,
    "int32": 4,
    "int64": 8,
}

# Codes shared with the native RedOp enum (csrc/include/commbench/reduce.h).
REDOPS: dict[str, int] = {"sum": 0, "prod": 1, "max": 2, "min": 3}


def itemsize_of(name: str) -> int:
    try:
        return DTYPES[name]
    except KeyError:
        raise CommbenchError(f"unknown dtype '{name}': choose one of {', '.join(DTYPES)}") from None


def dtype_of(name: str):
    """The torch dtype of a name of DTYPES."""
    itemsize_of(name)
    import torch
    return getattr(torch, name)


def redop_code(name: str) -> int:
    try:
        return REDOPS[name]
    except KeyError:
        raise CommbenchError(f"unknown op '{name}': choose one of {', '.join(REDOPS)}") from None


@dataclass(frozen=True)
class CollectiveSpec:
    name: str
    busbw_factor: Callable[[int], float]
    pairwise: bool = False  # between two endpoints (p2p, copies), whatever the number of ranks

    def bandwidths(self, size_bytes: int, seconds: float, ranks: int, moved: int = 1) -> tuple[float, Optional[float]]:
        """(algbw, busbw) in GB/s (1e9 B/s); `moved` counts directions that carry size_bytes at once.
        busbw is None for a collective on one rank: nothing crosses a link."""
        algbw = moved * size_bytes / seconds / 1e9 if seconds > 0 else 0.0
        busbw = algbw * self.busbw_factor(ranks) if (self.pairwise or ranks > 1) else None
        return algbw, busbw


def _registered() -> dict[str, CollectiveSpec]:
    from .collectives import all_collectives
    return {c.name: CollectiveSpec(c.name, c.busbw_factor) for c in all_collectives()}


COLLECTIVES: dict[str, CollectiveSpec] = {
    **_registered(),
    # Between one pair of endpoints, the pair is the "bus".
    "pingpong": CollectiveSpec("pingpong", lambda p: 1.0, pairwise=True),
    "bandwidth": CollectiveSpec("bandwidth", lambda p: 1.0, pairwise=True),
    "peer_copy": CollectiveSpec("peer_copy", lambda p: 1.0, pairwise=True),
    "h2d": CollectiveSpec("h2d", lambda p: 1.0, pairwise=True),
    "d2h": CollectiveSpec("d2h", lambda p: 1.0, pairwise=True),
    "staged": CollectiveSpec("staged", lambda p: 1.0, pairwise=True),
}
