"""The registry of transports: who moves the data (MPI, NCCL, gloo), which impls each offers for
which collective on which device, and how one of them is timed. An impl is either the transport's
library call (named after the transport) or one of our algorithms (collectives/*.py) run over the
transport's point-to-point calls (`algorithm@transport`, collectives/impls.py)."""

from __future__ import annotations

import contextlib
from typing import Optional

import numpy as np

from ..collectives.impls import impl_name, resolve, split_impl
from ..errors import CommbenchError
from ..results import nccl_knobs
from ..results.series import variant
from .base import Transport
from .gloo import GLOO
from .mpi import MPI
from .nccl import NCCL

TRANSPORTS: tuple[Transport, ...] = (MPI, NCCL, GLOO)


def transport_names() -> list[str]:
    return [t.name for t in TRANSPORTS]


def transport(name: str):
    """The transport of a name (p2p's and links' --impl)."""
    for t in TRANSPORTS:
        if t.name == name:
            return t
    raise CommbenchError(f"unknown transport '{name}': choose from {', '.join(transport_names())}")


def over_mpi(impl_names, what: Optional[str] = None) -> Optional[str]:
    """What of a run goes over MPI, in a refusal's words: `what` (a command) or `--impl NAME` for the
    first of the impls or transports named that runs over MPI; None where none does."""
    name = next((n for n in impl_names if split_impl(n)[1] == MPI.name), None)
    return None if name is None else what or f"--impl {name}"


def default_p2p_transport(launcher) -> str:
    """p2p without --impl: MPI, or gloo under torchrun, which starts no MPI."""
    return GLOO.name if launcher == "torchrun" else MPI.name


class Impl:
    """One way to run a collective: our algorithm over a transport, or (algorithm None) the
    transport's own call."""

    def __init__(self, transport: Transport, algorithm: Optional[str], description: str, fields: Optional[dict] = None):
        self.transport, self.algorithm, self.description = transport, algorithm, description
        self.name = impl_name(algorithm, transport.name)
        # What its records carry beside the impl's name: a variant of NCCL's call (results/nccl_knobs.py).
        self.fields = fields or {}
        self.label = variant({"impl": self.name, **self.fields})

    def prepare(self, world, cfg) -> None:
        self.transport.prepare(world, cfg, f"--impl {self.name}")

    def choice(self, coll, send_bytes: int, recv_bytes: int) -> Optional[dict]:
        """What the library chose for its call on buffers of these bytes, as it reports it (NCCL's
        algorithm, protocol and channels); None for our algorithms and where the library reports
        nothing."""
        return self.transport.library_choice(coll, send_bytes, recv_bytes) if self.algorithm is None else None

    def choice_reported(self):
        """The scope in which the library reports its choice (a size's untimed check): outside it, the
        timed calls run without the reports' cost."""
        return self.transport.choice_reported() if self.algorithm is None else contextlib.nullcontext()

    def refusal(self, error: Exception) -> Optional[str]:
        """Where `error` is the library refusing a forced variant (every rank alike), what it said;
        None otherwise, and for every impl that is no variant."""
        return self.transport.refusal(error) if self.fields else None

    def rank_times(self, world, coll, send, recv, op: int, iters: int, cfg, agg: int = 1,
                   delayed: bool = False, loop: int = 1, gated: bool = True) -> np.ndarray:
        """Every rank's own seconds per call, ranks x samples, on every rank: a sample is `loop`
        operations back to back (1: the per-iteration timing), each of `agg` calls fused as the
        transport allows; `delayed`: with cfg's --delay (RunConfig.delay_for); `gated`: launch-free
        where the timing and the transport allow it (NCCL's per-iteration samples)."""
        own = self.transport.times(world, coll, self.algorithm, send, recv, op, iters, cfg, agg,
                                   cfg.delay_for(world.rank) if delayed else 0.0, loop, gated)
        return world.all_times(own)


def impls_for(coll, device: str) -> dict[str, Impl]:
    """Every impl of `coll` on `device`, by name, library calls first."""
    impls = (Impl(t, algorithm, description) for t in TRANSPORTS for algorithm, description in t.impls(coll, device).items())
    return {impl.name: impl for impl in impls}


def default_impls(coll, device: str, launcher) -> list[str]:
    """What runs without --impl: everything on the CPU (only gloo under torchrun, which has no MPI);
    NCCL's call and our algorithms on GPUs."""
    known = impls_for(coll, device)
    if device == "cpu":
        return ["gloo"] if launcher == "torchrun" and "gloo" in known else list(known)
    return [n for n, i in known.items() if i.transport is NCCL]


def nccl_variants(variants: list[dict]) -> list[Impl]:
    """NCCL's call once per variant of nccl_knobs.variants, each on a communicator of its own."""
    from .nccl import ForcedNccl
    return [Impl(ForcedNccl(v), None, "NCCL's call with " + ", ".join(
        f"{k.env}={v[k.field]}" for k in nccl_knobs.KNOBS if k.field in v), v) for v in variants]


def _typed(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def gpu_only(text: str, coll) -> bool:
    """Whether an impl of the comma list `text` runs on GPUs alone (--device auto then picks cuda);
    a bare algorithm runs on both."""
    cpu, cuda = impls_for(coll, "cpu"), impls_for(coll, "cuda")
    return any(n not in cpu and n in cuda for n in (resolve(t, coll, "cpu") for t in _typed(text)))


def parse_impls(text: str, coll, device: str) -> list[Impl]:
    """The impls of a comma list as typed (collectives/impls.py's resolve), refused in one line where
    one is unknown or runs on the other device."""
    known = impls_for(coll, device)
    typed = _typed(text)
    if not typed:
        raise CommbenchError(f"empty --impl: choose from {', '.join(known)}")
    if len(typed) != len(text.split(",")):  # 'mpi,,' or 'mpi, ': a name left out, not a list of one
        raise CommbenchError(f"--impl '{text}' has an empty name: give a comma list of names, e.g. {','.join(list(known)[:2])}")
    names = []
    for t in typed:
        n = resolve(t, coll, device)
        names.append(n)
        if n in known:
            continue
        other = "cuda" if device == "cpu" else "cpu"
        if n in impls_for(coll, other):
            raise CommbenchError(f"impl '{t}' of {coll.name} runs with --device {other}, not --device {device}")
        everywhere = sorted(set(known) | set(impls_for(coll, other)))
        raise CommbenchError(f"unknown impl '{t}' for {coll.name}: choose from {', '.join(everywhere)}")
    return [known[n] for n in dict.fromkeys(names)]
