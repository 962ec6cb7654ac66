"""All-gather: every rank ends with every rank's block, block j from rank j."""

from .base import GatheredBlocks, Segment, step_model


class AllGather(GatheredBlocks):
    name = "allgather"
    aliases = ("all_gather",)
    title = "all-gather"
    nccl_function = "AllGather"
    summary = "Time all-gather implementations (size = the gathered buffer, as nccl-tests counts it)."
    order = 1
    algorithms = {"ring": "commbench ring all-gather (the all-reduce ring's second half)"}

    def expected(self, rank, p, root, shape):
        c = shape.send
        return [Segment(j * c, c, 0, j) for j in range(p)]

    def cost_model(self, algorithm, p):
        return step_model("ring", p - 1, (p - 1) / p, algorithm != "ring") if p > 1 else None


COLLECTIVE = AllGather()
