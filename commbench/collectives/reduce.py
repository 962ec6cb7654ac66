"""Reduce: the root ends with the reduction of all ranks' buffers."""

from .base import REDUCED, UNTOUCHED, Collective, Segment, rooted_pipeline_model


class Reduce(Collective):
    name = "reduce"
    title = "reduce"
    nccl_function = "Reduce"
    summary = "Time reduce implementations towards --root."
    reduces = True
    rooted = True
    order = 4
    algorithms = {"tree": "commbench pipelined binary tree reduce (the all-reduce tree's first half)",
                  "chain": "commbench pipelined chain reduce (the same pipeline, one child per rank)"}

    def busbw_factor(self, p):
        return 1.0

    def expected(self, rank, p, root, shape):
        # The other ranks' receive buffers stay as they were, as MPI's and NCCL's reduce leave them
        # (nccl-tests checks them too).
        return [Segment(0, shape.recv, 0, REDUCED if rank == root else UNTOUCHED)]

    def cost_model(self, algorithm, p):
        return rooted_pipeline_model(algorithm, p)


COLLECTIVE = Reduce()
