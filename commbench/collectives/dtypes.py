"""The element types a sweep takes and the reduction ops, by the names the command line uses."""

from __future__ import annotations

from ..errors import CommbenchError

# Bytes per element of each dtype a sweep takes. The buffers' dtypes are looked up only where buffers
# are made: importing torch costs seconds, which a command that starts ranks or reads files, or a rank
# with host buffers, need not pay.
DTYPES: dict[str, int] = {
    "float32": 4,
    "float64": 8,
    "float16": 2,
    "bfloat16": 2,
    "int32": 4,
    "int64": 8,
}

# Codes shared with the native RedOp enum (csrc/include/commbench/reduce.h).
REDOPS: dict[str, int] = {"sum": 0, "prod": 1, "max": 2, "min": 3}


def itemsize_of(name: str) -> int:
    try:
        return DTYPES[name]
    except KeyError:
        raise CommbenchError(f"unknown dtype '{name}': choose one of {', '.join(DTYPES)}") from None


def dtype_of(name: str):
    """The torch dtype of a name of DTYPES (GPU buffers, gloo's calls)."""
    itemsize_of(name)
    import torch
    return getattr(torch, name)


def numpy_dtype(name: str):
    """The NumPy dtype of a name of DTYPES (host buffers): NumPy's own, bfloat16 from ml_dtypes."""
    itemsize_of(name)
    import numpy as np
    if name == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def redop_code(name: str) -> int:
    try:
        return REDOPS[name]
    except KeyError:
        raise CommbenchError(f"unknown op '{name}': choose one of {', '.join(REDOPS)}") from None
