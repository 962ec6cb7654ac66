"""Send-recv: every rank sends its buffer to rank + 1 and receives rank - 1's, all at once."""

from .base import Collective, Segment
from .cost import HOCKNEY


class SendRecv(Collective):
    name = "sendrecv"
    title = "send-recv"
    summary = "Time a ring shift: each rank sends to rank+1 and receives from rank-1 at once."
    in_place = False
    order = 6
    peer_to_peer = True

    def busbw_factor(self, p):
        return 1.0

    def expected(self, rank, p, root, shape):
        return [Segment(0, shape.recv, 0, (rank - 1) % p)]

    def cost_model(self, algorithm, p):
        return HOCKNEY if p > 1 else None


COLLECTIVE = SendRecv()
