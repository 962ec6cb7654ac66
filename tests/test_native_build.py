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
