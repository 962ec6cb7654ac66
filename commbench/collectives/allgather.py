"""All-gather: every rank ends with every rank's block, block j from rank j."""

from .base import BLOCK_ALIGN, Collective, Segment, per_rank_shape, step_model


class AllGather(Collective):
    name = "allgather"
    aliases = ("all_gather",)
    title = "all-gather"
    nccl_function = "AllGather"
    summary = "Time all-gather implementations (size = the gathered buffer, as nccl-tests counts it)."
    order = 1
    algorithms = {"ring": "commbench ring all-gather (the all-reduce ring's second half)"}

    def busbw_factor(self, p):
        return (p - 1) / p

    def shape(self, size_bytes, itemsize, p, align=BLOCK_ALIGN):
        return per_rank_shape(size_bytes, itemsize, p, 1, p, align)

    def places(self, rank, shape):
        return rank * shape.send, 0

    def expected(self, rank, p, root, shape):
        c = shape.send
        return [Segment(j * c, c, 0, j) for j in range(p)]

    def cost_model(self, algorithm, p):
        return step_model("ring", p - 1, (p - 1) / p, algorithm != "ring") if p > 1 else None


COLLECTIVE = AllGather()
