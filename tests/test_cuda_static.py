"""Static checks of the CUDA sources: defects that a GPU-less machine cannot run into but a GPU node
would, caught by reading the code."""

import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CSRC = os.path.join(ROOT, "csrc")


def _sources():
    for dirpath, _, files in os.walk(CSRC):
        for name in sorted(files):
            if name.endswith((".cu", ".cuh", ".cpp", ".h")):
                path = os.path.join(dirpath, name)
                with open(path) as f:
                    yield os.path.relpath(path, ROOT), f.read()


def _without_comments(text: str) -> str:
    return re.sub(r"//[^\n]*", "", text)


def test_every_kernel_launch_is_checked():
    """A failed launch shows only in cudaGetLastError, never in a later synchronisation: every kernel
    goes through kernels.cu's launch(), whose one chevron launch (or the emulated runtime's, in the
    emulated build) is followed by check_launch."""
    launches = 0
    for path, text in _sources():
        code = _without_comments(text)
        chevrons = [m.start() for m in re.finditer(r"<<<", code)]
        if path != os.path.join("csrc", "cuda", "kernels.cu"):
            assert not chevrons, f"{path}: a kernel launched outside kernels.cu's launch()"
            continue
        helper = code[code.index("void launch(void (*kernel)"):]
        helper = helper[:helper.index("\n}\n")]
        assert len(chevrons) == 1 and "kernel<<<" in helper and helper.rstrip().endswith("check_launch(name);")
        launches = len(re.findall(r"\blaunch\((\w+)", code))
    assert launches >= 6  # reduce and SM copy, fill, value fill, check, byte fill, byte check, sentinel


def test_check_kernels_start_from_a_sentinel():
    """A check kernel that never ran must not read as '0 wrong': each counting kernel takes its
    block's share off a sentinel, and each launch of one arms the sentinel first."""
    text = _without_comments(open(os.path.join(CSRC, "cuda", "kernels.cu")).read())
    counting = re.findall(r"__global__ void (\w*count\w*)\(", text)
    assert counting
    for kernel in counting:
        body = text[text.index(f"void {kernel}("):]
        body = body[:body.index("\n}\n")]
        assert "add_block_count(" in body, kernel
        launch = text.index(f"launch({kernel}")
        before = text[:launch]
        assert "arm_counter(" in before[before.rindex("\n}\n"):], f"{kernel} launched without arming the counter"


@pytest.mark.parametrize("call", ["cudaStreamSynchronize", "cudaDeviceSynchronize"])
def test_communicator_never_waits_unbounded(call):
    """A dead peer hangs an unbounded synchronisation for ever: the communicator's waits poll with a
    deadline and NCCL's asynchronous error instead."""
    text = _without_comments(open(os.path.join(CSRC, "cuda", "device_comm.h")).read())
    comm = text[text.index("class DeviceComm"):text.index("\n};\n", text.index("class DeviceComm"))]
    assert call not in comm
    assert "ncclCommGetAsyncError" in comm and "ncclCommAbort" in text


def test_the_deadline_reaches_python_as_a_timeout():
    """A wait past --timeout throws DeadlineExceeded, which Python sees as TimeoutError: the run then
    reports a timeout (tests/test_faults.py drives that path with the same exception on the CPU)."""
    comm = _without_comments(open(os.path.join(CSRC, "cuda", "device_comm.h")).read())
    deadline = comm[comm.index("if (now > deadline)"):]
    assert deadline[:deadline.index("}")].count("throw DeadlineExceeded(") == 1
    module = _without_comments(open(os.path.join(CSRC, "cuda", "module.cpp")).read())
    assert 'py::register_exception<DeadlineExceeded>(m, "DeadlineExceeded", PyExc_TimeoutError);' in module


def test_every_nccl_and_cuda_call_is_checked():
    """Every NCCL call and every CUDA call that can fail sits inside a check, except the cleanup in
    destructors and abort paths, which must not throw."""
    unchecked_ok = {"cudaSetDevice", "cudaFree", "cudaFreeHost", "cudaStreamDestroy", "cudaEventDestroy",
                    "cudaGraphExecDestroy", "cudaGraphDestroy", "cudaStreamEndCapture", "cudaGetLastError",
                    "cudaGetErrorString", "ncclGetErrorString", "ncclGetLastError", "ncclGroupEnd",
                    "ncclCommDestroy", "ncclCommAbort", "cudaRuntimeGetVersion", "ncclGetVersion",
                    "cudaDriverGetVersion", "cudaGetDeviceCount", "cudaGetDevice"}
    checked = 0
    for path, text in _sources():  # csrc/cuda, and the shared headers (library_calls.h's NCCL calls)
        code = _without_comments(text)
        for m in re.finditer(r"\b((?:cuda|nccl)[A-Z]\w*)\(", code):
            name = m.group(1)
            if name in unchecked_ok:
                continue
            checked += 1
            start = code.rfind("\n", 0, m.start())
            context = code[max(0, start - 200):m.start()]
            line = code[:m.start()].count("\n") + 1
            assert re.search(r"(cuda_check|nccl_check|nccl_enqueued)\(\s*$", context) or \
                re.search(r"(const cudaError_t rc|cudaError_t rc|const ncclResult_t rc) = $", context), \
                f"{path}:{line}: {name} result not checked"
    assert checked > 50


def test_mpi_recipes_never_copy_gpu_memory_on_the_host():
    """Defect 9: the MPI library's call on GPU buffers (a CUDA-aware MPI) copied the broadcast root's
    input and the in-place reduce-scatter's result with a host memcpy, a segfault on device memory.
    Every copy in an MPI recipe goes through local_copy, which leaves GPU memory to the library."""
    text = _without_comments(open(os.path.join(CSRC, "include", "commbench", "library_calls.h")).read())
    helper = text[text.index("void local_copy("):]
    helper = helper[:helper.index("\n}\n")]
    recipes = text[text.index("MpiCall mpi_call("):text.index("#endif", text.index("MpiCall mpi_call("))]
    assert "if (!device)" in helper and "MPI_COMM_SELF" in helper
    assert not re.search(r"\bstd::mem(cpy|move)\(", recipes)
    assert recipes.count("local_copy(") == 2
    collective = _without_comments(open(os.path.join(CSRC, "include", "commbench", "collective_times.h")).read())
    assert "!send.on_host()}" in collective  # CallBuffers.device is set from where the buffers are
