"""What can be checked before any rank starts, so that bad input costs one line and no launch: the
result file's place, the rank pairs, and whether the largest buffers fit in the host's memory.

The standalone parent runs these checks before it spawns mpirun, for the ranks it will start; under
an external launcher rank 0 runs them before any measurement (cli.common.run_ranks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from ..errors import CommbenchError
from ..launch.rendezvous import check_master_address
from ..launch.world import mpi_launch_needed
from ..results.atomic import check_folder, check_new_file
from ..sizes import format_size
from ..transports import GLOO, over_mpi

# Our tensors are not all the memory a rank uses: the MPI and gloo libraries keep buffers of their own.
LIBRARY_SLACK_BYTES = 4 << 20
# What a rank costs before any buffer (resident memory of a rank at work, measured on the development
# VM): an interpreter with MPI and NumPy, and one that has loaded torch (gloo, GPUs). A
# thousand ranks of the first need 59 GiB.
HOST_RANK_BYTES = 60 << 20
TORCH_RANK_BYTES = 520 << 20
# Share of the available memory a sweep may plan to use: the rest is for everything else on the host.
USABLE_SHARE = 0.9
# The native p2p loops count bytes in MPI's int.
P2P_MAX_BYTES = 2**31 - 1


def memory_problem(what: str, need: int, available: int, where: str, lower: str = "the largest --sizes") -> Optional[str]:
    """The refusal of a sweep whose largest buffers need more than a safe share of the available
    memory, or None (also when the available memory is unknown); `lower`: what the user can lower."""
    if available and need > USABLE_SHARE * available:
        return (f"{what} needs about {need / 2**30:.1f} GiB on {where} but {available / 2**30:.1f} GiB is "
                f"available; lower {lower}, or use fewer ranks per host")
    return None


def collective_bytes(coll, size_bytes: int, itemsize: int, ranks: int, placements: tuple[bool, ...]) -> int:
    """Memory one rank needs for the calls of `coll` at one size, in each of `placements` (in_place
    each): its send and receive buffers (one buffer in place, run/buffers.py), one message of
    working memory, and the libraries' own buffers."""
    shape = coll.shape(size_bytes, itemsize, ranks)
    receive = max(shape.send, shape.recv) if True in placements else shape.recv
    buffers = ((shape.send if False in placements else 0) + receive) * itemsize
    return buffers + shape.size + LIBRARY_SLACK_BYTES


def p2p_bytes(size_bytes: int) -> int:
    """Memory one rank of a pair needs: its send and receive buffers and the libraries' own buffers."""
    return 2 * size_bytes + LIBRARY_SLACK_BYTES


@dataclass(frozen=True)
class Checks:
    """What a run between ranks needs, checked before it starts."""

    output: Optional[str]  # the result file; None: a new name in commbench-results/
    what: str  # the largest call, in words, for the memory refusal: "all-reduce of 1G"
    bytes_per_rank: Callable[[int], int]  # host memory one rank needs, given the number of ranks
    device: str = "cpu"
    pairs: Optional[str] = None  # p2p --pairs, as typed
    root: Optional[int] = None  # a rooted collective's --root
    delay_rank: Optional[int] = None  # the rank of a collective's --delay
    ranks_used: Optional[int] = None  # the most ranks one measurement takes (scale --ranks)
    needs_mpi: Optional[str] = None  # what of the run goes over MPI, in a refusal's words (transports.over_mpi)
    lower: str = "the largest --sizes"  # what sets the memory a rank needs, for the refusal
    loads_torch: bool = False  # the ranks load torch (gloo, GPUs): each costs TORCH_RANK_BYTES

    def before_joining(self, launcher: str) -> None:
        """Checked by every rank of a launch before it meets the others: what the launch itself must
        offer. A torchrun-style launch has no MPI, and its ranks would load torch and join gloo's
        rendezvous (seconds) only to refuse."""
        if self.needs_mpi and launcher == "torchrun":
            raise CommbenchError(mpi_launch_needed(self.needs_mpi))

    def run(self, ranks: int, local_ranks: int, host: str) -> None:
        """Raises CommbenchError for the first problem; `local_ranks` of the `ranks` share `host`."""
        from ..node import machine
        from ..results.document import DEFAULT_DIR, taken_message
        if self.output is not None:
            check_new_file(self.output, taken_message(self.output))
        else:
            check_folder(DEFAULT_DIR, DEFAULT_DIR)
        if self.ranks_used is not None and self.ranks_used > ranks:
            raise CommbenchError(f"--ranks asks for {self.ranks_used} ranks but {ranks} are started: launch "
                                 f"{self.ranks_used} (--np {self.ranks_used} without a launcher) or lower --ranks")
        if self.root is not None and self.root >= ranks:
            raise CommbenchError(f"--root {self.root}: only {ranks} rank(s)")
        if self.delay_rank is not None and self.delay_rank >= ranks:
            raise CommbenchError(f"--delay: no rank {self.delay_rank} among the {ranks} started (numbered from 0)")
        if self.pairs is not None:
            resolve_pairs(self.pairs, ranks)
        check_master_address(local_ranks == ranks, f"host {host}")
        # Every rank's process, and on the host the buffers too. A GPU's memory is checked by each rank
        # on its own device: the parent cannot see it without creating a CUDA context that the ranks
        # would then share the GPU with.
        footprint = TORCH_RANK_BYTES if self.loads_torch else HOST_RANK_BYTES
        buffers = self.bytes_per_rank(ranks) if self.device == "cpu" else 0
        ranks_text = f"{local_ranks} rank(s) (each about {footprint >> 20} MiB before its buffers)"
        problem = memory_problem(f"{self.what} on {ranks_text}" if buffers else ranks_text, (footprint + buffers) * local_ranks,
                                 machine.meminfo_bytes("MemAvailable"), f"host {host}",
                                 f"{self.lower} or --np" if buffers else "--np")
        if problem:
            raise CommbenchError(problem)


def for_collective(coll, cfg, output: Optional[str]) -> Checks:
    from ..collectives.dtypes import itemsize_of
    largest, itemsize = max(cfg.sizes), max(itemsize_of(d) for d in cfg.dtype.split(","))
    return Checks(output, f"{coll.title} of {format_size(largest)}",
                  lambda ranks: collective_bytes(coll, largest, itemsize, ranks, cfg.placements), cfg.device,
                  root=cfg.root if coll.rooted else None, delay_rank=cfg.delay[0] if cfg.delay else None,
                  needs_mpi=over_mpi(cfg.impls), loads_torch=cfg.device == "cuda" or GLOO.name in cfg.impls)


def for_p2p(sizes: list[int], pairs: str, device: str, output: Optional[str], transport: str, command: str) -> Checks:
    """`command` (commbench p2p or links) over `transport`."""
    largest = max(sizes)
    if largest > P2P_MAX_BYTES:
        raise CommbenchError(f"p2p sizes must stay below 2 GiB (got {format_size(largest)})")
    return Checks(output, f"a p2p message of {format_size(largest)}", lambda ranks: p2p_bytes(largest), device, pairs,
                  needs_mpi=over_mpi([transport], command), loads_torch=device == "cuda" or transport == GLOO.name)


def resolve_pairs(spec: str, ranks: int) -> tuple[tuple[int, int], ...]:
    """'all' (every pair), or a list like '0:1,0:3'. Pairs are kept as (lower, higher): the lower
    rank sends first."""
    if ranks < 2:
        raise CommbenchError("p2p needs at least 2 ranks: use --np 2 or launch 2 ranks")
    if spec.strip() == "all":
        return tuple((a, b) for a in range(ranks) for b in range(a + 1, ranks))
    pairs = []
    for part in spec.split(","):
        try:
            a, b = (int(x) for x in part.split(":"))
        except ValueError:
            raise CommbenchError(f"bad pair '{part}' in --pairs: write A:B (e.g. 0:1), a list 0:1,0:2, or 'all'") from None
        if a == b or not (0 <= a < ranks and 0 <= b < ranks):
            raise CommbenchError(f"bad pair '{part}' in --pairs: two different ranks below {ranks}")
        pairs.append((min(a, b), max(a, b)))
    return tuple(dict.fromkeys(pairs))
