"""Broadcast: every rank ends with the root's buffer."""

from .base import Collective, Segment, step_model, tree_depth


class Broadcast(Collective):
    name = "broadcast"
    aliases = ("bcast",)
    title = "broadcast"
    summary = "Time broadcast implementations from --root."
    rooted = True
    order = 3
    algorithms = {"tree": "commbench pipelined binary tree broadcast (the all-reduce tree's second half)",
                  "chain": "commbench pipelined chain broadcast (the same pipeline, one child per rank)"}

    def busbw_factor(self, p):
        return 1.0

    def expected(self, rank, p, root, shape):
        return [Segment(0, shape.recv, 0, root)]

    def cost_model(self, impl, p):
        if p < 2:
            return None
        # A chain's pipeline fills over p - 1 hops; the tree's over its depth.
        if impl == "chain":
            return step_model("pipelined chain", p - 1, 1.0, False)
        return step_model("pipelined tree", tree_depth(p), 1.0, impl != "tree")


COLLECTIVE = Broadcast()
