"""Reduce-scatter: rank r ends with block r of the reduction of all ranks' buffers."""

from .base import REDUCED, ScatteredBlocks, Segment, step_model


class ReduceScatter(ScatteredBlocks):
    name = "reducescatter"
    aliases = ("reduce_scatter",)
    title = "reduce-scatter"
    nccl_function = "ReduceScatter"
    summary = "Time reduce-scatter implementations (size = each rank's input, as nccl-tests counts it)."
    reduces = True
    order = 2
    algorithms = {"ring": "commbench ring reduce-scatter (the all-reduce ring's first half)"}

    def expected(self, rank, p, root, shape):
        return [Segment(0, shape.recv, rank * shape.recv, REDUCED)]

    def cost_model(self, algorithm, p):
        return step_model("ring", p - 1, (p - 1) / p, algorithm != "ring") if p > 1 else None


COLLECTIVE = ReduceScatter()
