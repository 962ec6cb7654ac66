"""The registry of collectives: every module of this package but base defines one (COLLECTIVE), and
is found here by itself, so a new collective is one new module (plus its library calls in the
native transports, csrc/host/mpi_calls.h and csrc/cuda/nccl_calls.h)."""

from __future__ import annotations

import importlib
import pkgutil

from ..errors import CommbenchError
from .base import REDUCED, Collective, Segment, Shape

__all__ = ["REDUCED", "Collective", "Segment", "Shape", "all_collectives", "get", "names"]


def _load() -> dict[str, Collective]:
    found = []
    for info in pkgutil.iter_modules(__path__):
        if info.name != "base":
            found.append(importlib.import_module(f"{__name__}.{info.name}").COLLECTIVE)
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
