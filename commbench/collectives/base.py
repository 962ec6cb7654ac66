"""What a collective is to commbench: its buffers for p ranks (nccl-tests' layout and size
convention), the exact data it must deliver, its bus-bandwidth factor and the cost models of the
algorithms that implement it. Each collective is one module of this package that defines
`COLLECTIVE`, an instance of a subclass of Collective."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from .cost import CostModel

# count_wrong's source for "the exact reduction over all ranks" (pattern.h).
REDUCED = -1
# A Segment's source for "as the call found it": a receive buffer the call must leave alone. Out of
# place it holds the stale value (count_wrong's kUntouched); in place, where send and receive are one
# buffer, the rank's own input (run/collective.py resolves it).
UNTOUCHED = -2
# A Segment's source for "stale, placed as it may be": a receive buffer's elements that neither the
# call nor, in place, the rank's input write (a gather's non-root buffer around its own block).
STALE = -3
# Our algorithms that send a message in chunks, one pipeline stage per chunk (the chunk is an option).
PIPELINED = ("tree", "chain")
# nccl-tests (since 2.13.12) rounds a per-rank block down to whole 16-byte units, so that every
# rank's block starts aligned at any rank count; a size's rows then match its rows exactly.
BLOCK_ALIGN = 16


@dataclass(frozen=True)
class Shape:
    """One call's buffers in elements per rank, and the figures nccl-tests prints for it."""
    send: int
    recv: int
    count: int  # elements as nccl-tests prints them (per rank where the buffers differ in size)
    size: int  # bytes as nccl-tests prints them: the larger of the send and receive buffers


@dataclass(frozen=True)
class Segment:
    """Elements [offset, offset + count) of a buffer hold pattern indices first, first + 1, ... of
    rank `source`'s values, or of the exact reduction when source is REDUCED; or, when it is
    UNTOUCHED, what they held before the call."""
    offset: int
    count: int
    first: int
    source: int


class Collective:
    name = ""  # the command and the result files' `op`
    aliases: tuple = ()  # other spellings the command accepts (nccl-tests')
    title = ""  # in prose: "all-gather"
    summary = ""  # the command's help line
    reduces = False  # takes --op
    rooted = False  # takes --root
    in_place = True  # has an in-place form
    order = 0  # position in listings
    peer_to_peer = False  # NCCL runs its call as sends and receives (its point-to-point channels to each peer)
    # NCCL's name for its call in its log and its profiler's collective events (AllReduce); empty where
    # NCCL runs the call as sends and receives, for which it chooses no algorithm.
    nccl_function = ""
    # Our algorithms for it: name -> what it does (the transport adds "over MPI/NCCL point-to-point").
    algorithms: dict = {}

    @property
    def pipelined(self) -> bool:
        """One of our algorithms for it pipelines in chunks (its command takes --chunk)."""
        return any(name in PIPELINED for name in self.algorithms)

    def busbw_factor(self, p: int) -> float:
        raise NotImplementedError

    def shape(self, size_bytes: int, itemsize: int, p: int, align: int = BLOCK_ALIGN) -> Shape:
        """Same-size buffers of size_bytes (all-reduce, broadcast, reduce, send-recv); `align`: the
        bytes a per-rank block is rounded down to (collectives of per-rank blocks), 1 for none."""
        n = size_bytes // itemsize
        return Shape(n, n, n, n * itemsize)

    def places(self, rank: int, shape: Shape) -> tuple[int, int]:
        """In place: offsets of the send and the receive buffer within one buffer of
        max(send, recv) elements, as nccl-tests places them."""
        return 0, 0

    def inputs(self, rank: int, p: int, root: int, shape: Shape) -> list[Segment]:
        """What each rank's send buffer is filled with: its own values."""
        return [Segment(0, shape.send, 0, rank)]

    def expected(self, rank: int, p: int, root: int, shape: Shape) -> list[Segment]:
        raise NotImplementedError

    def cost_model(self, algorithm: Optional[str], p: int) -> Optional[CostModel]:
        """t = alpha_messages*alpha + bytes_factor*n/BW for our `algorithm` (None: the library's call,
        read through the algorithm it most likely runs) on p ranks; None on one rank."""
        raise NotImplementedError


class GatheredBlocks(Collective):
    """One block in, p blocks out, block j from rank j (all-gather, gather): the size is the gathered
    buffer, and in place a rank's input is block r of its output, as nccl-tests places it."""

    def busbw_factor(self, p):
        return (p - 1) / p

    def shape(self, size_bytes, itemsize, p, align=BLOCK_ALIGN):
        return per_rank_shape(size_bytes, itemsize, p, 1, p, align)

    def places(self, rank, shape):
        return rank * shape.send, 0


class ScatteredBlocks(Collective):
    """p blocks in, block r out (reduce-scatter, scatter): the size is the input, and in place a rank's
    output is block r of its input, as nccl-tests places it."""

    def busbw_factor(self, p):
        return (p - 1) / p

    def shape(self, size_bytes, itemsize, p, align=BLOCK_ALIGN):
        return per_rank_shape(size_bytes, itemsize, p, p, 1, align)

    def places(self, rank, shape):
        return 0, rank * shape.recv


def per_rank_shape(size_bytes: int, itemsize: int, p: int, send_blocks: int, recv_blocks: int, align: int) -> Shape:
    """Buffers of c-element blocks, c = size // (p * itemsize) rounded down to whole `align` bytes:
    nccl-tests rounds the size down to whole blocks and prints c as the count."""
    c = size_bytes // itemsize // p
    c -= c % max(1, align // itemsize)
    return Shape(c * send_blocks, c * recv_blocks, c, c * max(send_blocks, recv_blocks) * itemsize)


def step_model(algorithm: str, steps: int, bytes_factor: float, effective: bool) -> CostModel:
    """An algorithm of `steps` latency terms that moves bytes_factor * n per rank over its link."""
    return CostModel(f"{algorithm}: t = {steps}*alpha + {bytes_factor:.3g}*n/BW", steps, bytes_factor, effective)


def tree_depth(p: int) -> int:
    return max(1, int(math.floor(math.log2(p))))


def binomial_model(algorithm: Optional[str], p: int) -> Optional[CostModel]:
    """A rooted collective of per-rank blocks (gather, scatter) over a binomial tree: its deepest rank
    is floor(log2 p) messages from the root, and the root's link carries every other rank's block,
    (p - 1)/p of the n bytes; a library's call reads as the same tree, its figures effective."""
    if p < 2:
        return None
    return step_model("binomial tree", tree_depth(p), (p - 1) / p, algorithm != "binomial")


def rooted_blocks_expected(rank: int, p: int, root: int, c: int) -> list[Segment]:
    """A gather's receive buffer of p blocks of c: at the root block j from rank j; elsewhere left as
    it was, the rank's own block (its input, in place) amid stale elements."""
    if rank == root:
        return [Segment(j * c, c, 0, j) for j in range(p)]
    return [Segment(0, rank * c, 0, STALE), Segment(rank * c, c, 0, UNTOUCHED),
            Segment((rank + 1) * c, (p - rank - 1) * c, 0, STALE)]


def rooted_pipeline_model(algorithm: Optional[str], p: int) -> Optional[CostModel]:
    """A rooted collective (broadcast, reduce) that moves n bytes over each link once, pipelined: a
    chain's pipeline fills over p - 1 hops, the tree's over its depth; a library's call reads as a
    tree, its figures effective."""
    if p < 2:
        return None
    if algorithm == "chain":
        return step_model("pipelined chain", p - 1, 1.0, False)
    return step_model("pipelined tree", tree_depth(p), 1.0, algorithm != "tree")
