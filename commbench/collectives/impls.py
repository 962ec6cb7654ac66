"""Impl names, the one meaning of a result's and --impl's `impl`: one of our algorithms over a
transport is `algorithm@transport` (ring@mpi, tree@nccl); a transport's own library call is the
transport's name alone (mpi, nccl, gloo). Names are built, split and read from what a user typed
here alone, so that every layer above (transports, results, analyses) agrees on them."""

from __future__ import annotations

from typing import Optional

SEPARATOR = "@"
# Our algorithms run over MPI point-to-point on the CPU and over NCCL's send/recv on GPUs: a bare
# algorithm name (what --impl and result files took before the transport was named) means it over
# the transport of its device.
ALGORITHM_TRANSPORT = {"cpu": "mpi", "cuda": "nccl"}
# The impl of every copy (collectives.COPIES): CUDA's own copies, told apart by their `mode` (copy
# engine, SM kernel, host memory pinned or pageable, staged through pinned host memory).
COPY_IMPL = "cuda"


def impl_name(algorithm: Optional[str], transport: str) -> str:
    """`algorithm@transport`, or the transport alone for its library's call (algorithm None)."""
    return transport if algorithm is None else f"{algorithm}{SEPARATOR}{transport}"


def split_impl(impl: str) -> tuple[Optional[str], str]:
    """(algorithm, or None for the library's call, transport) of an impl name; `nccl@nccl` is NCCL's
    call as `nccl` is. A name without a transport (an importer's `osu`, copies' `cuda`) is its own."""
    algorithm, separator, transport = impl.rpartition(SEPARATOR)
    if not separator or algorithm == transport:
        return None, transport
    return algorithm, transport


def algorithm_of(impl: str) -> Optional[str]:
    return split_impl(impl)[0]


def resolve(typed: str, coll, device: str) -> str:
    """The impl name of what a user typed for `coll` on `device` (cpu or cuda): one of coll's
    algorithms alone runs over the device's transport (ALGORITHM_TRANSPORT), anything else is read
    as a name (`mpi@mpi` is `mpi`). Whether it runs there is the transports' to say."""
    if typed in coll.algorithms:
        return impl_name(typed, ALGORITHM_TRANSPORT[device])
    return impl_name(*split_impl(typed))
