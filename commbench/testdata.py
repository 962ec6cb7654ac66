"""Exact test data (pattern.h) on host or device buffers: fill a rank's input, count wrong results."""

from __future__ import annotations


class HostData:
    def __init__(self, world):
        self.world = world

    def fill(self, tensor, code: int) -> None:
        from . import _host
        _host.fill_pattern(tensor, code, self.world.rank, self.world.size)

    def count_wrong(self, tensor, code: int) -> int:
        from . import _host
        return int(_host.count_wrong(tensor, code, self.world.size))


class DeviceData:
    """The same pattern, filled and checked by kernels of commbench._cuda on the rank's GPU."""

    def __init__(self, comm):
        self.comm = comm

    def fill(self, tensor, code: int) -> None:
        self.comm.fill_pattern(tensor, code)

    def count_wrong(self, tensor, code: int) -> int:
        return int(self.comm.count_wrong(tensor, code))
