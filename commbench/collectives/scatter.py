"""Scatter: rank j ends with block j of the root's buffer (nccl-tests' scatter_perf)."""

from .base import BLOCK_ALIGN, Collective, Segment, binomial_model, per_rank_shape


class Scatter(Collective):
    name = "scatter"
    title = "scatter"
    summary = "Time scatter implementations from --root (size = the root's buffer, as nccl-tests counts it)."
    rooted = True
    order = 8
    peer_to_peer = True
    algorithms = {"binomial": "commbench binomial tree scatter (the gather's tree, subtrees sent down)"}

    def busbw_factor(self, p):
        return (p - 1) / p

    def shape(self, size_bytes, itemsize, p, align=BLOCK_ALIGN):
        return per_rank_shape(size_bytes, itemsize, p, p, 1, align)

    def places(self, rank, shape):
        return 0, rank * shape.recv

    def expected(self, rank, p, root, shape):
        return [Segment(0, shape.recv, rank * shape.recv, root)]

    def cost_model(self, algorithm, p):
        return binomial_model(algorithm, p)


COLLECTIVE = Scatter()
