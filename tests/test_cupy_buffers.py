"""--buffers cupy without a GPU or CuPy: the argument handling, the CUDA array interface a CuPy-like
object exposes, and the one-line refusal when CuPy is missing."""

import importlib.util
import sys

import pytest
from conftest import commbench, stub_gpu_env

from commbench.errors import CommbenchError
from commbench.run import cupy_buffers


class FakeArray:
    """What a CuPy array shows of itself: the CUDA array interface, version 3."""

    def __init__(self, shape=(5,), typestr="<f4", strides=None, version=3):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (0x7F0000001000, False),
                                         "strides": strides, "version": version}


def test_interface_of_a_contiguous_vector():
    assert cupy_buffers.interface_of(FakeArray()) == (0x7F0000001000, 5)
    assert cupy_buffers.interface_of(FakeArray(typestr="<f8", strides=(8,))) == (0x7F0000001000, 5)


@pytest.mark.parametrize("array,needle", [
    (object(), "no CUDA array interface"),
    (FakeArray(version=1), "no CUDA array interface"),
    (FakeArray(shape=(2, 3)), "one-dimensional"),
    (FakeArray(strides=(8,)), "contiguous"),
])
def test_interface_refusals(array, needle):
    with pytest.raises(CommbenchError, match=needle):
        cupy_buffers.interface_of(array)


def test_missing_cupy_says_how_to_get_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(CommbenchError, match=r"pip install 'commbench\[cupy\]' \(cupy-cuda13x\)"):
        cupy_buffers.require_cupy()


def test_request_checks():
    cupy_buffers.check_request(["mpi"], "cuda", ["float32", "int64"])
    with pytest.raises(CommbenchError, match="--impl mpi --device cuda alone"):
        cupy_buffers.check_request(["mpi", "nccl"], "cuda", ["float32"])
    with pytest.raises(CommbenchError, match="--impl mpi --device cuda alone"):
        cupy_buffers.check_request(["mpi"], "cpu", ["float32"])
    with pytest.raises(CommbenchError, match="CuPy has no bfloat16"):
        cupy_buffers.check_request(["mpi"], "cuda", ["bfloat16", "float32"])


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None,
                    reason="CuPy is installed: the refusal for its absence does not apply")
def test_command_line_refusals(workdir):
    r = commbench(["allgather", "--device", "cpu", "--buffers", "cupy", "--sizes", "1K"], cwd=workdir)
    assert r.returncode == 2 and r.stderr.strip().endswith("applies to --impl mpi --device cuda alone (the other "
                                                          "impls allocate their own buffers)"), r.stderr
    # A GPU made visible by a stub, no CuPy installed: refused before any rank starts.
    r = commbench(["reducescatter", "--device", "cuda", "--impl", "mpi", "--buffers", "cupy", "--sizes", "1K"],
                  cwd=workdir, env=stub_gpu_env())
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--buffers cupy needs CuPy" in r.stderr, r.stderr
