"""All-to-all: block j of rank i's buffer goes to rank j, where it lands as block i."""

from .base import BLOCK_ALIGN, Collective, Segment, per_rank_shape, step_model


class AllToAll(Collective):
    name = "alltoall"
    aliases = ("all_to_all",)
    title = "all-to-all"
    summary = "Time all-to-all implementations (size = each rank's buffer, as nccl-tests counts it)."
    in_place = False
    order = 5
    peer_to_peer = True
    algorithms = {"pairwise": "commbench pairwise exchange (step d: send to rank+d, receive from rank-d)"}

    def busbw_factor(self, p):
        return (p - 1) / p

    def shape(self, size_bytes, itemsize, p, align=BLOCK_ALIGN):
        return per_rank_shape(size_bytes, itemsize, p, p, p, align)

    def expected(self, rank, p, root, shape):
        c = shape.count
        return [Segment(i * c, c, rank * c, i) for i in range(p)]

    def cost_model(self, algorithm, p):
        return step_model("pairwise", p - 1, (p - 1) / p, algorithm != "pairwise") if p > 1 else None


COLLECTIVE = AllToAll()
