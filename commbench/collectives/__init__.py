"""The registry of collectives: every module of this package that defines `COLLECTIVE` (an instance
of a subclass of base.Collective) is found here by itself, so a new collective is one new module
(plus the libraries' calls for it, csrc/include/commbench/library_calls.h).
The other modules (base, cost, dtypes) are what collectives are made of."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Optional

from ..errors import CommbenchError
from .base import REDUCED, Collective, Segment, Shape
from .cost import HOCKNEY, CostModel
from .impls import algorithm_of

__all__ = ["REDUCED", "Collective", "Segment", "Shape", "all_collectives", "bandwidths", "cost_model", "get",
           "names"]

# Copies within one process (commbench copy, p2p --device cuda), CUDA's own (impl cuda) in a mode.
COPIES = ("peer_copy", "h2d", "d2h", "staged")
# Operations between one pair of endpoints, whatever the number of ranks (p2p tests and copies):
# the pair is the "bus", and one message is their whole cost model.
PAIRWISE = ("pingpong", "bandwidth", *COPIES)


def _load() -> dict[str, Collective]:
    found = []
    for info in pkgutil.iter_modules(__path__):
        coll = getattr(importlib.import_module(f"{__name__}.{info.name}"), "COLLECTIVE", None)
        if coll is not None:
            found.append(coll)
    return {c.name: c for c in sorted(found, key=lambda c: c.order)}


_REGISTRY = _load()


def all_collectives() -> list[Collective]:
    return list(_REGISTRY.values())


def names() -> list[str]:
    return list(_REGISTRY)


def get(name: str) -> Collective:
    """The collective of a name or alias (nccl-tests' spellings included)."""
    for c in _REGISTRY.values():
        if name == c.name or name in c.aliases:
            return c
    raise CommbenchError(f"unknown collective '{name}': choose from {', '.join(_REGISTRY)}")


def bandwidths(op: str, size_bytes: int, seconds: float, ranks: int, moved: int = 1) -> tuple[float, Optional[float]]:
    """(algbw, busbw) in GB/s (1e9 B/s) of `op` (a collective, a p2p test or a copy); `moved` counts
    directions that carry size_bytes at once. busbw = algbw * the collective's factor (nccl-tests'
    doc/PERFORMANCE.md), comparable to the link bandwidth whatever the number of ranks; None for a
    collective on one rank, where nothing crosses a link."""
    algbw = moved * size_bytes / seconds / 1e9 if seconds > 0 else 0.0
    if op in PAIRWISE:
        return algbw, algbw
    return algbw, (algbw * _REGISTRY[op].busbw_factor(ranks) if ranks > 1 else None)


def cost_model(op: str, impl: str, ranks: int) -> Optional[CostModel]:
    """The cost model of impl's algorithm (None: the library's call) for `op` on `ranks` ranks; None
    when nothing crosses a link (a collective on one rank)."""
    return _REGISTRY[op].cost_model(algorithm_of(impl), ranks) if op in _REGISTRY else HOCKNEY
