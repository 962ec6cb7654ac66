"""Exact test data (pattern.h) on host or device buffers: fill a rank's input, count wrong results."""

from __future__ import annotations


class HostData:
    """Pattern indices first, first + 1, ... of this rank's values (fill), or of rank `source`'s
    values or, with source -1, of the exact reduction over all ranks (count_wrong)."""

    def __init__(self, world):
        self.world = world

    def fill(self, tensor, code: int, first: int = 0) -> None:
        from .. import _host
        _host.fill_pattern(tensor, code, self.world.rank, self.world.size, first)

    def count_wrong(self, tensor, code: int, first: int = 0, source: int = -1) -> int:
        from .. import _host
        return int(_host.count_wrong(tensor, code, self.world.size, first, source))


class DeviceData:
    """The same pattern, filled and checked by kernels of commbench._cuda on the rank's GPU; no
    communicator needed, so a GPU run of the MPI library makes none."""

    def __init__(self, world):
        from ..node.gpu import cuda_module
        self.world, self.cuda = world, cuda_module()

    def fill(self, tensor, code: int, first: int = 0) -> None:
        self.cuda.fill_pattern(tensor, code, self.world.rank, self.world.size, first)

    def count_wrong(self, tensor, code: int, first: int = 0, source: int = -1) -> int:
        return int(self.cuda.count_wrong(tensor, code, self.world.size, first, source))
