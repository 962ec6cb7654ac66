"""The run configuration: one frozen object that every rank's loops take, and what the result file
records of it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from .policy import Policy

# --place: where a collective's result goes, as nccl-tests names the halves of its rows: out of place
# (a receive buffer apart from the send one), in place (one buffer), or both, each size out of place
# and then in place.
PLACES = {"out": (False,), "in": (True,), "both": (False, True)}


@dataclass(frozen=True)
class RunConfig:
    op: str  # a registered collective, 'p2p' or 'copy'
    impls: tuple[str, ...]
    sizes: tuple[int, ...]
    dtype: str = "float32"
    redop: str = "sum"
    place: str = "out"  # a key of PLACES
    device: str = "cpu"  # 'cpu' or 'cuda'
    graph: bool = False  # GPU: replay each iteration from a CUDA graph
    chunk_bytes: int = 1 << 20  # tree pipeline chunk
    root: int = 0  # rooted collectives
    agg: int = 1  # calls per timed iteration (nccl-tests' -m)
    buffers: str = "commbench"  # who allocates GPU buffers: commbench (run/device_arrays.py), or cupy (--impl mpi)
    timeout_s: float = 300.0  # GPU: how long one timed call may wait for its peers
    window: int = 64  # p2p bandwidth: messages in flight
    pairs: tuple[tuple[int, int], ...] = field(default_factory=tuple)
    delay: Optional[tuple[int, float]] = None  # collectives: (rank, us) that rank waits before each timed iteration
    policy: Policy = Policy()
    # Collectives: variants of NCCL's call measured beside it (--nccl-algo, --nccl-proto), each as the
    # fields its records carry (results/nccl_knobs.variants).
    nccl_variants: tuple = ()

    def delay_for(self, rank: int) -> float:
        """The seconds `rank` waits before each timed iteration (--delay)."""
        return self.delay[1] * 1e-6 if self.delay and self.delay[0] == rank else 0.0

    @property
    def placements(self) -> tuple[bool, ...]:
        """in_place of each call a size is measured with, in order."""
        return PLACES[self.place]

    def describe(self) -> dict:
        return {"op": self.op, "impls": list(self.impls), "sizes": list(self.sizes), "dtype": self.dtype,
                "redop": self.redop, "place": self.place, "device": self.device, "graph": self.graph,
                "chunk_bytes": self.chunk_bytes, "root": self.root, "agg": self.agg, "buffers": self.buffers, "timeout_s": self.timeout_s,
                "window": self.window, "pairs": [list(p) for p in self.pairs],
                "delay": {"rank": self.delay[0], "us": self.delay[1]} if self.delay else None,
                "policy": self.policy.describe(),
                **({"nccl_variants": [dict(v) for v in self.nccl_variants]} if self.nccl_variants else {})}
