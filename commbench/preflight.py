"""What can be checked before any rank starts, so that bad input costs one line and no launch: the
result file's place, the rank pairs, and whether the largest buffers fit in the host's memory.

The standalone parent runs these checks before it spawns mpirun, for the ranks it will start; under
an external launcher rank 0 runs them before any measurement (cli.common.run_ranks).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Callable, Optional

from .atomic import create_temporary
from .errors import CommbenchError
from .sizes import format_size

# Our tensors are not all the memory a rank uses: the MPI and gloo libraries keep buffers of their own.
LIBRARY_SLACK_BYTES = 4 << 20
# Share of the available memory a sweep may plan to use: the rest is for everything else on the host.
USABLE_SHARE = 0.9
# The native p2p loops count bytes in MPI's int.
P2P_MAX_BYTES = 2**31 - 1


def check_new_file(path: str, exists_message: str) -> None:
    """Refuses a path that exists (a device such as /dev/null included) or whose folder cannot take a
    new file."""
    if os.path.lexists(path):
        raise CommbenchError(exists_message)
    check_folder(os.path.dirname(path) or ".", path)


def check_folder(folder: str, path: str) -> None:
    """The nearest existing folder on the way to `folder` must take a new file. A probe file is
    created there and removed, because permission bits tell nothing for root, nor for read-only and
    virtual file systems (/proc, /sys)."""
    existing = folder
    while not os.path.exists(existing):
        existing = os.path.dirname(os.path.abspath(existing))
    if not os.path.isdir(existing):
        raise CommbenchError(f"cannot write {path}: {existing} is not a folder")
    try:
        probe = create_temporary(existing, "probe")
    except OSError as e:
        raise CommbenchError(f"cannot write {path}: {existing} takes no new files ({e.strerror})") from None
    with contextlib.suppress(OSError):
        os.unlink(probe)


def memory_problem(what: str, need: int, available: int, where: str) -> Optional[str]:
    """The refusal of a sweep whose largest buffers need more than a safe share of the available
    memory, or None (also when the available memory is unknown)."""
    if available and need > USABLE_SHARE * available:
        return (f"{what} needs about {need / 2**30:.1f} GiB on {where} but {available / 2**30:.1f} GiB is "
                f"available; lower the largest --sizes or use fewer ranks per host")
    return None


def collective_bytes(coll, size_bytes: int, itemsize: int, ranks: int, in_place: bool) -> int:
    """Memory one rank needs for one call of `coll`: its send and receive buffers (one buffer in
    place), one message of working memory, and the libraries' own buffers."""
    shape = coll.shape(size_bytes, itemsize, ranks)
    buffers = (max(shape.send, shape.recv) if in_place else shape.send + shape.recv) * itemsize
    return buffers + shape.size + LIBRARY_SLACK_BYTES


def p2p_bytes(size_bytes: int) -> int:
    """Memory one rank of a pair needs: its message buffer and the libraries' own buffers."""
    return size_bytes + LIBRARY_SLACK_BYTES


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

    def run(self, ranks: int, local_ranks: int, host: str) -> None:
        """Raises CommbenchError for the first problem; `local_ranks` of the `ranks` share `host`."""
        from . import machine
        from .results import DEFAULT_DIR, taken_message
        if self.output:
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
            from .sweep import resolve_pairs
            resolve_pairs(self.pairs, ranks)
        # A GPU's memory is checked by each rank on its own device: the parent cannot see it
        # without creating a CUDA context that the ranks would then share the GPU with.
        if self.device == "cpu":
            problem = memory_problem(self.what, self.bytes_per_rank(ranks) * local_ranks,
                                     machine.meminfo_bytes("MemAvailable"), f"host {host} ({local_ranks} rank(s))")
            if problem:
                raise CommbenchError(problem)


def for_collective(coll, cfg, output: Optional[str]) -> Checks:
    from .spec import itemsize_of
    largest, itemsize = max(cfg.sizes), max(itemsize_of(d) for d in cfg.dtype.split(","))
    return Checks(output, f"{coll.title} of {format_size(largest)}",
                  lambda ranks: collective_bytes(coll, largest, itemsize, ranks, cfg.in_place), cfg.device,
                  root=cfg.root if coll.rooted else None, delay_rank=cfg.delay[0] if cfg.delay else None)


def for_p2p(sizes: list[int], pairs: str, device: str, output: Optional[str]) -> Checks:
    largest = max(sizes)
    if largest > P2P_MAX_BYTES:
        raise CommbenchError(f"p2p sizes must stay below 2 GiB (got {format_size(largest)})")
    return Checks(output, f"a p2p message of {format_size(largest)}", lambda ranks: p2p_bytes(largest), device, pairs)
