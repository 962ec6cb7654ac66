"""Gather: the root ends with every rank's block, block j from rank j (nccl-tests' gather_perf)."""

from .base import GatheredBlocks, binomial_model, rooted_blocks_expected


class Gather(GatheredBlocks):
    name = "gather"
    title = "gather"
    summary = "Time gather implementations towards --root (size = the gathered buffer, as nccl-tests counts it)."
    rooted = True
    order = 7
    peer_to_peer = True
    algorithms = {"binomial": "commbench binomial tree gather (round k: ranks 2^k apart send their subtrees up)"}

    def expected(self, rank, p, root, shape):
        return rooted_blocks_expected(rank, p, root, shape.send)

    def cost_model(self, algorithm, p):
        return binomial_model(algorithm, p)


COLLECTIVE = Gather()
