"""All-reduce: every rank ends with the reduction of all ranks' buffers."""

from .base import REDUCED, Collective, Segment, tree_depth
from .cost import CostModel


class AllReduce(Collective):
    name = "allreduce"
    aliases = ("all_reduce",)
    title = "all-reduce"
    nccl_function = "AllReduce"
    summary = "Time all-reduce implementations across message sizes."
    reduces = True
    order = 0
    algorithms = {"ring": "commbench ring (reduce-scatter + all-gather)",
                  "tree": "commbench pipelined binary tree (reduce + broadcast)"}

    def busbw_factor(self, p):
        return 2 * (p - 1) / p

    def expected(self, rank, p, root, shape):
        return [Segment(0, shape.recv, 0, REDUCED)]

    def cost_model(self, algorithm, p):
        if p < 2:
            return None
        if algorithm == "tree":
            depth = tree_depth(p)
            return CostModel(f"pipelined binary tree: t = 2*{depth}*alpha + 2n/BW", 2 * depth, 2.0, False)
        return CostModel(f"ring: t = 2({p}-1)*alpha + 2({p}-1)/{p}*n/BW", 2 * (p - 1), 2 * (p - 1) / p, algorithm != "ring")


COLLECTIVE = AllReduce()
