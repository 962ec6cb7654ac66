"""GPU buffers owned by CuPy, for the MPI library's calls on GPUs (--impl mpi --device cuda
--buffers cupy): the convention of Python HPC codes, which hand CuPy arrays to CUDA-aware MPI through
the CUDA array interface. The arrays are viewed as DeviceArrays without a copy, so the same native
timed loops and the same exact checks run on them."""

from __future__ import annotations

import numpy as np

from ..errors import CommbenchError

# Our dtypes that CuPy has: it has no bfloat16.
_DTYPES = ("float32", "float64", "float16", "int32", "int64")


def require_cupy():
    """The cupy module, or a one-line refusal that says how to get it."""
    try:
        import cupy
    except ImportError as e:
        raise CommbenchError(f"--buffers cupy needs CuPy ({e}); install it with "
                             f"pip install 'commbench[cupy]' (cupy-cuda13x)") from None
    return cupy


def check_request(impls: list[str], device: str, dtypes: list[str]) -> None:
    """--buffers cupy is for the MPI library's calls on GPU buffers, in a dtype CuPy has."""
    if device != "cuda" or impls != ["mpi"]:
        raise CommbenchError("--buffers cupy applies to --impl mpi --device cuda alone (the other impls allocate "
                             "their own buffers)")
    missing = [d for d in dtypes if d not in _DTYPES]
    if missing:
        raise CommbenchError(f"--buffers cupy: CuPy has no {', '.join(missing)}")


def interface_of(array) -> tuple[int, int]:
    """(device pointer, element count) of a one-dimensional, contiguous array exposing the CUDA array
    interface (version 2 or later), refusing anything the native loops cannot take as it is."""
    face = getattr(array, "__cuda_array_interface__", None)
    if not isinstance(face, dict) or face.get("version", 0) < 2:
        raise CommbenchError("--buffers cupy: the array exposes no CUDA array interface (version 2 or later)")
    shape, strides = tuple(face.get("shape", ())), face.get("strides")
    itemsize = np.dtype(face["typestr"]).itemsize
    if len(shape) != 1 or (strides is not None and tuple(strides) != (itemsize,)):
        raise CommbenchError(f"--buffers cupy: expected a contiguous one-dimensional array, got shape {shape}, "
                             f"strides {strides}")
    return int(face["data"][0]), shape[0]


def empty(count: int, dtype: str, device: int):
    """`count` elements allocated by CuPy on GPU `device`, viewed as a DeviceArray."""
    from types import SimpleNamespace

    from .device_arrays import DeviceArray
    cupy = require_cupy()
    with cupy.cuda.Device(device):
        array = cupy.empty(max(count, 1), dtype=dtype)[:count]
    ptr, _ = interface_of(array)
    # The view holds a reference to the array, whose memory it shares.
    return DeviceArray(SimpleNamespace(ptr=ptr, device=device, owner=array), count, dtype)
