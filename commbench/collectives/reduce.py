"""Reduce: the root ends with the reduction of all ranks' buffers."""

from .base import REDUCED, Collective, Segment, step_model, tree_depth


class Reduce(Collective):
    name = "reduce"
    title = "reduce"
    summary = "Time reduce implementations towards --root."
    reduces = True
    rooted = True
    order = 4
    algorithms = {"tree": "commbench pipelined binary tree reduce (the all-reduce tree's first half)",
                  "chain": "commbench pipelined chain reduce (the same pipeline, one child per rank)"}

    def busbw_factor(self, p):
        return 1.0

    def expected(self, rank, p, root, shape):
        # Only the root's receive buffer is defined afterwards.
        return [Segment(0, shape.recv, 0, REDUCED)] if rank == root else []

    def cost_model(self, impl, p):
        if p < 2:
            return None
        # A chain's pipeline fills over p - 1 hops; the tree's over its depth.
        if impl == "chain":
            return step_model("pipelined chain", p - 1, 1.0, False)
        return step_model("pipelined tree", tree_depth(p), 1.0, impl != "tree")


COLLECTIVE = Reduce()
