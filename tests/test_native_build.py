"""The reduction loop of reduce.h must vectorise: compile it as the extension does and read the
compiler's vectorisation report."""

import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROBE = r"""
#include <cstdint>
#include "commbench/reduce.h"
using namespace commbench;
template void reduce_into<float, OpSum>(float*, const float*, std::size_t, OpSum);
template void reduce_into<double, OpProd>(double*, const double*, std::size_t, OpProd);
template void reduce_into<int32_t, OpMax>(int32_t*, const int32_t*, std::size_t, OpMax);
template void reduce_into<int64_t, OpMin>(int64_t*, const int64_t*, std::size_t, OpMin);
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
def test_reduction_loop_vectorises(tmp_path):
    src = tmp_path / "probe.cpp"
    src.write_text(PROBE)
    r = subprocess.run(["g++", "-std=c++17", "-O3", "-fopt-info-vec-optimized", "-c", str(src), "-o",
                        str(tmp_path / "probe.o"), "-I", os.path.join(ROOT, "csrc", "include")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    vectorised = [line for line in r.stderr.splitlines() if "reduce.h" in line and "loop vectorized" in line]
    # One vectorised loop per instantiation (the compiler may report a versioned copy too).
    assert len(vectorised) >= 4, r.stderr


def test_host_extension_imports_and_reports_mpi():
    from commbench import _host
    assert "MPI" in _host.mpi_library_version()
    assert 0 < _host.clock_floor() < 1e-5


def test_host_extension_takes_numpy_and_torch_buffers_and_refuses_what_it_cannot_use():
    """Buffers cross into the native loops as one type (csrc/common/buffer_caster.h): a NumPy array
    of any sweep dtype (bfloat16 from ml_dtypes) or a host tensor, written where the view starts; a
    buffer the loops cannot use is refused in Python's terms, never written into or crashed on."""
    import ml_dtypes
    import numpy as np
    import torch

    from commbench import _host
    from commbench.collectives.dtypes import DTYPES, numpy_dtype
    for name in DTYPES:
        a = np.zeros(8, dtype=numpy_dtype(name))
        _host.fill_pattern(a[2:6], 0, 0, 2, 0)
        assert (a[:2] == 0).all() and (a[6:] == 0).all() and _host.count_wrong(a[2:6], 0, 2, 0, 0) == 0
        t = torch.zeros(4, dtype=getattr(torch, name))
        _host.fill_pattern(t, 0, 0, 2, 0)
        assert np.array_equal(t.double().numpy(), a[2:6].astype(np.float64))
    assert np.dtype(ml_dtypes.bfloat16) == numpy_dtype("bfloat16")
    frozen = np.frombuffer(bytes(16), dtype=np.float32)
    misaligned = np.zeros(9, dtype=np.uint8)[1:].view(np.float32)
    for buffer, message in [(np.zeros(8, np.float32)[::2], "contiguous"), (frozen, "writable"),
                            (misaligned, "aligned"), (np.zeros(4, np.int8), "unsupported dtype int8"),
                            (torch.zeros(4, device="meta"), "not on meta")]:
        with pytest.raises(ValueError, match=message):
            _host.fill_pattern(buffer, 0, 0, 2, 0)
    assert bytes(frozen.tobytes()) == bytes(16)
    with pytest.raises(TypeError):
        _host.fill_pattern([0.0, 1.0], 0, 0, 2, 0)
