"""Gather: the root ends with every rank's block, block j from rank j (nccl-tests' gather_perf)."""

from .base import BLOCK_ALIGN, Collective, binomial_model, per_rank_shape, rooted_blocks_expected


class Gather(Collective):
    name = "gather"
    title = "gather"
    summary = "Time gather implementations towards --root (size = the gathered buffer, as nccl-tests counts it)."
    rooted = True
    order = 7
    peer_to_peer = True
    algorithms = {"binomial": "commbench binomial tree gather (round k: ranks 2^k apart send their subtrees up)"}

    def busbw_factor(self, p):
        return (p - 1) / p

    def shape(self, size_bytes, itemsize, p, align=BLOCK_ALIGN):
        return per_rank_shape(size_bytes, itemsize, p, 1, p, align)

    def places(self, rank, shape):
        return rank * shape.send, 0

    def expected(self, rank, p, root, shape):
        return rooted_blocks_expected(rank, p, root, shape.send)

    def cost_model(self, algorithm, p):
        return binomial_model(algorithm, p)


COLLECTIVE = Gather()
