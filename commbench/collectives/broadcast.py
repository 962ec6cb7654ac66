"""Broadcast: every rank ends with the root's buffer."""

from .base import Collective, Segment, rooted_pipeline_model


class Broadcast(Collective):
    name = "broadcast"
    aliases = ("bcast",)
    title = "broadcast"
    nccl_function = "Broadcast"
    summary = "Time broadcast implementations from --root."
    rooted = True
    order = 3
    algorithms = {"tree": "commbench pipelined binary tree broadcast (the all-reduce tree's second half)",
                  "chain": "commbench pipelined chain broadcast (the same pipeline, one child per rank)"}

    def busbw_factor(self, p):
        return 1.0

    def expected(self, rank, p, root, shape):
        return [Segment(0, shape.recv, 0, root)]

    def cost_model(self, algorithm, p):
        return rooted_pipeline_model(algorithm, p)


COLLECTIVE = Broadcast()
