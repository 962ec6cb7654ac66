"""What is measured: dtypes, reduction ops and per-collective specs (nccl-tests' hook table).

The bus-bandwidth factors follow nccl-tests' doc/PERFORMANCE.md: busbw = algbw * factor(p), chosen so
that busbw is comparable to the link bandwidth whatever the number of ranks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from .errors import CommbenchError

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int32": torch.int32,
    "int64": torch.int64,
}

# Codes shared with the native RedOp enum (csrc/include/commbench/reduce.h).
REDOPS: dict[str, int] = {"sum": 0, "prod": 1, "max": 2, "min": 3}


def dtype_of(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise CommbenchError(f"unknown dtype '{name}': choose one of {', '.join(DTYPES)}") from None


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
