"""Scatter: rank j ends with block j of the root's buffer (nccl-tests' scatter_perf)."""

from .base import ScatteredBlocks, Segment, binomial_model


class Scatter(ScatteredBlocks):
    name = "scatter"
    title = "scatter"
    summary = "Time scatter implementations from --root (size = the root's buffer, as nccl-tests counts it)."
    rooted = True
    order = 8
    peer_to_peer = True
    algorithms = {"binomial": "commbench binomial tree scatter (the gather's tree, subtrees sent down)"}

    def expected(self, rank, p, root, shape):
        return [Segment(0, shape.recv, rank * shape.recv, root)]

    def cost_model(self, algorithm, p):
        return binomial_model(algorithm, p)


COLLECTIVE = Scatter()
