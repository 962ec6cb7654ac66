"""GPU buffers of the sweeps: memory that commbench._cuda allocates (DeviceMemory), seen as a flat
array of one dtype. The native loops read them as they read a NumPy array or a torch tensor (the buffer
caster takes any object with data_ptr, device, numel and dtype), so a GPU rank needs no tensor
library, and the sweeps' buffers, NCCL's and the up-front memory check share one allocator. Whatever
touches the elements goes through the extension (fill, copies to and from host memory), each finished
when it returns: host code never reads device memory."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ..collectives.dtypes import itemsize_of, numpy_dtype
from ..node.gpu import cuda_module

# Bytes: the element type of point-to-point messages and of page-aligned raw buffers, beside the dtypes
# a sweep takes.
_BYTES = "uint8"


def _itemsize(dtype: str) -> int:
    return 1 if dtype == _BYTES else itemsize_of(dtype)


def _numpy(dtype: str):
    return np.dtype(np.uint8) if dtype == _BYTES else numpy_dtype(dtype)


class DeviceArray:
    """`count` elements of `dtype` from byte `offset` of `memory` (a DeviceMemory, or any object with
    the device pointer `ptr` and the ordinal `device`: CuPy's arrays); slices are views of the same
    memory."""

    def __init__(self, memory, count: int, dtype: str, offset: int = 0):
        self.memory, self.count, self.dtype, self.offset = memory, count, dtype, offset
        self.device = SimpleNamespace(type="cuda", index=memory.device)

    @classmethod
    def empty(cls, count: int, dtype: str, device: int) -> "DeviceArray":
        return cls(cuda_module().DeviceMemory(count * _itemsize(dtype), device), count, dtype)

    # What the buffer caster reads (csrc/common/buffer_caster.h).
    def data_ptr(self) -> int:
        return self.memory.ptr + self.offset

    def is_contiguous(self) -> bool:
        return True

    def get_device(self) -> int:
        return self.memory.device

    def numel(self) -> int:
        return self.count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, key: slice) -> "DeviceArray":
        start, stop, step = key.indices(self.count)
        if step != 1:
            raise ValueError("device arrays take contiguous slices only")
        return DeviceArray(self.memory, max(stop - start, 0), self.dtype, self.offset + start * _itemsize(self.dtype))

    def view(self, dtype: str) -> "DeviceArray":
        """The same bytes as another dtype."""
        nbytes = self.count * _itemsize(self.dtype)
        if nbytes % _itemsize(dtype) or self.offset % _itemsize(dtype):
            raise ValueError(f"{nbytes} bytes at offset {self.offset} are not whole {dtype} elements")
        return DeviceArray(self.memory, nbytes // _itemsize(dtype), dtype, self.offset)

    def fill(self, value: float) -> None:
        if self.count:
            cuda_module().fill(self, float(value))

    def __setitem__(self, key: slice, value) -> None:
        """a[i:j] = a number (every element) or host values of the same length."""
        target = self[key]
        if np.isscalar(value):
            target.fill(value)
        else:
            target.copy_from(np.asarray(value))

    def copy_from(self, host: np.ndarray) -> None:
        """The elements from host memory: an array of the same length and dtype, or of the same bytes."""
        host = np.ascontiguousarray(host)
        if host.nbytes != self.count * _itemsize(self.dtype):
            raise ValueError(f"{host.nbytes} host bytes for {self.count} {self.dtype} elements")
        if self.count:
            cuda_module().copy_from_host(self, host.view(np.uint8))

    def to_numpy(self) -> np.ndarray:
        """A host copy of the elements, in their dtype."""
        out = np.empty(self.count, dtype=_numpy(self.dtype))
        if self.count:
            cuda_module().copy_to_host(self, out.view(np.uint8))
        return out
