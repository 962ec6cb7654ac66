"""The GPU path. Without a GPU: the CUDA extension must still be built wherever a toolkit is, it must
share the host path's headers, and every GPU request must fail in one line. With a GPU (marker
`gpu`, run by `make gpu-check`): exact results and every GPU command end to end."""

import json
import multiprocessing
import os
import re
import subprocess
import sys
import sysconfig

import pytest
from conftest import commbench, in_process

from commbench import collectives
from commbench.collectives.dtypes import DTYPES, REDOPS, dtype_of
from commbench.node import toolkit
from commbench.node.gpu import cuda_module, visible_gpus
from commbench.node.machine import torch_version
from commbench.results import document as results

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _matching_toolkit():
    """The CUDA compiler the build would choose here (the same rule as setup.py), or None. torch's
    CUDA release read without importing torch: every pytest worker collects this module."""
    paths = sysconfig.get_paths()
    return toolkit.choose(torch_version().cuda, [paths["purelib"], paths["platlib"]], dict(os.environ))[0]


GPUS = visible_gpus()[0]
needs_gpu = pytest.mark.skipif(GPUS == 0, reason="no CUDA device visible")
# Hardware's own checks of what the emulated build covers in full already: every collective, dtype,
# reduction and placement on 3 ranks (test_emulated_gpu.py::test_the_exact_matrix_on_gpus).
on_hardware = pytest.mark.skipif(bool(os.environ.get("COMMBENCH_GPU_EMULATION")),
                                 reason="emulated: test_emulated_gpu.py::test_the_exact_matrix_on_gpus covers it")

# The argument lists of the command-line tests below (each run adds its own `-o`), at module level so
# that test_gpu_arguments.py parses these very lists on a host without a GPU.
NO_GPU_REQUESTS = [["allreduce", "--device", "cuda"], ["allreduce", "--impl", "nccl"], ["p2p", "--device", "cuda"],
                   ["p2p", "--impl", "nccl"], ["copy"]]
EXACT_CASES = [("float32", "sum", "out"), ("bfloat16", "prod", "in"), ("float16", "max", "out"), ("int64", "min", "both")]


def exact_args(dtype, op, place):
    # Fewer elements than ranks and counts the ranks do not divide (8 and 1000 bytes), then several MiB.
    return ["allreduce", "--device", "cuda", "--impl", "nccl,ring,tree", "--sizes", "8,1000,1M-4M:+1M",
            "--dtype", dtype, "--op", op, "--place", place, "--chunk", "64K", "--budget-ms", "20"]


GRAPH_ARGS = ["allreduce", "--device", "cuda", "--graph", "--sizes", "8-64K:x8", "--budget-ms", "20"]


def collective_args(name):
    """Every collective on the GPUs: NCCL's call and ours, in place where it has that form, at counts
    the ranks do not divide; the rooted ones from the last rank."""
    coll = collectives.get(name)
    return [name, "--device", "cuda", "--sizes", "4,1000,1M-3M:+1M", "--budget-ms", "20", "--agg", "2",
            *(["--place", "both"] if coll.in_place else []), *(["--root", str(GPUS - 1)] if coll.rooted and GPUS else []),
            *(["--dtype", "bfloat16", "--op", "max"] if coll.reduces else [])]


# Every collective of the registry beyond the all-reduce, which EXACT_CASES cover.
COLLECTIVE_NAMES = [name for name in collectives.names() if name != "allreduce"]
# At most 100 timed iterations a cell: a 4-byte copy's budget would buy 2,000, each paying the host's
# synchronisation (about 90 us on the emulated GPUs, 16 cells a matrix) for what 100 show as well.
PEER_MATRIX_ARGS = ["p2p", "--device", "cuda", "--sizes", "4,16M", "--budget-ms", "20", "--max-iters", "100"]
PEER_READ_ARGS = ["p2p", "--device", "cuda", "--access", "read", "--sizes", "4,1M", "--budget-ms", "10", "--max-iters", "100"]
COPY_ARGS = ["copy", "--sizes", "4K,64M", "--budget-ms", "20", "--max-iters", "100"]
NCCL_P2P_ARGS = ["p2p", "--impl", "nccl", "--np", "2", "--sizes", "8,1M", "--budget-ms", "20"]
GPU_TEST_ARGS = [*NO_GPU_REQUESTS, *(exact_args(*case) for case in EXACT_CASES), GRAPH_ARGS, PEER_MATRIX_ARGS, PEER_READ_ARGS,
                 COPY_ARGS, NCCL_P2P_ARGS, *(collective_args(n) for n in COLLECTIVE_NAMES)]


@pytest.mark.skipif(_matching_toolkit() is None, reason="no CUDA compiler of torch's release (make install adds one)")
def test_cuda_extension_is_built_where_a_matching_toolkit_is():
    from commbench import _cuda  # an ImportError here means the build skipped or broke it
    assert re.match(r"CUDA runtime \d+\.\d+, NCCL \d+\.\d+\.\d+", _cuda.versions())
    for name in ("DeviceComm", "PeerCopy", "HostCopy", "StagedCopy", "reduce_tensors", "device_identity"):
        assert hasattr(_cuda, name)
    assert toolkit.read_build_info()["cuda"]["built"] is True


LOADS_WITHOUT_TORCH = """
import sys
from commbench.node.gpu import cuda_absence, cuda_module
assert cuda_module() is not None, cuda_absence()
print("torch" in sys.modules, cuda_module().versions())
"""


@pytest.mark.skipif(_matching_toolkit() is None, reason="no CUDA compiler of torch's release (make install adds one)")
def test_the_cuda_extension_loads_without_torch(tmp_path):
    """Linked against the CUDA runtime and NCCL alone, loaded by the files the build recorded: a GPU
    rank and `version -v` import no torch (seconds of their start). With those files gone, as for an
    extension built elsewhere, it still loads (from its run path, else with torch's libraries)."""
    r = subprocess.run([sys.executable, "-c", LOADS_WITHOUT_TORCH], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith("False CUDA runtime "), r.stderr
    info = toolkit.read_build_info()
    assert [os.path.basename(p).split(".so")[0] for p in info["cuda"]["libraries"]] == ["libcudart", "libnccl"]
    moved = tmp_path / "_build_info.json"
    moved.write_text(json.dumps({"cuda": {**info["cuda"], "libraries": [str(tmp_path / "gone" / "libnccl.so.2")]}}))
    patched = f"from commbench.node import toolkit; toolkit.BUILD_INFO = {str(moved)!r}\n" + LOADS_WITHOUT_TORCH
    r = subprocess.run([sys.executable, "-c", patched], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0 and " CUDA runtime " in r.stdout, r.stderr


def _includes(path):
    with open(os.path.join(ROOT, path)) as f:
        return set(re.findall(r'#include "([^"]+)"', f.read()))


def test_device_path_uses_the_host_definitions():
    """One schedule, one executor, one dispatch of our algorithms, one functor, one test pattern: the
    CUDA sources include the very headers the host extension uses, and nothing else defines them."""
    assert {"commbench/own_algorithms.h", "commbench/reduce.h"} <= _includes("csrc/cuda/device_comm.h")
    assert {"commbench/own_algorithms.h", "commbench/reduce.h"} <= _includes("csrc/host/module.cpp")
    assert {"commbench/collectives.h", "commbench/schedule.h"} <= _includes("csrc/include/commbench/own_algorithms.h") | \
        _includes("csrc/include/commbench/collectives.h")
    assert {"commbench/reduce.h", "commbench/pattern.h"} <= _includes("csrc/cuda/kernels.cu")
    assert "commbench/pattern.h" in _includes("csrc/host/module.cpp")
    definitions = {r"struct OpSum\b": "reduce.h", r"struct RingSchedule\b": "schedule.h",
                   r"void ring_allreduce\(": "collectives.h", r"void tree_allreduce\(": "collectives.h",
                   r"int pattern_value\(": "pattern.h", r"std::function<void\(\)> own_call\(": "own_algorithms.h"}
    for dirpath, _, files in os.walk(os.path.join(ROOT, "csrc")):
        for name in files:
            text = open(os.path.join(dirpath, name)).read()
            for pattern, home in definitions.items():
                if re.search(pattern, text):
                    assert name == home, f"{pattern} defined in {name}, not only in {home}"


@pytest.mark.skipif(GPUS > 0, reason="a GPU is visible: the no-GPU errors do not apply")
@pytest.mark.parametrize("args", NO_GPU_REQUESTS)
def test_gpu_requests_fail_cleanly_without_gpu(args, workdir, monkeypatch, capsys):
    monkeypatch.chdir(workdir)
    code, _, err = in_process(args, monkeypatch, capsys)
    assert code == 2
    assert "needs a GPU" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and os.listdir(workdir) == []


# ---- on a GPU -------------------------------------------------------------------------------------

def in_own_process(func, *args):
    """func(*args) in a process of its own that ends when it returns. A GPU context that the test
    process kept would make the ranks of every later test fail on a GPU in EXCLUSIVE_PROCESS compute
    mode (doctor warns of it)."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_reported, (func, *args))


def _reported(func, *args):
    """func(*args), any failure raised as an AssertionError with its text: pytest's own outcomes (a
    failed pytest.raises) are BaseExceptions, which a pool's worker never hands back (the test hung)."""
    try:
        return func(*args)
    except BaseException as e:  # noqa: BLE001 - handed back as a plain failure
        raise AssertionError(f"{type(e).__name__}: {e}") from None


def _reduction_cases():
    """Both kernel paths for every dtype and op: 16-byte vectors (aligned, offset 0) and the scalar
    tail / misaligned path (offset 1 element), against torch's own element-wise ops on the host, on
    small integers (exact)."""
    import torch

    from commbench.run.device_arrays import DeviceArray
    _cuda = cuda_module()

    def bits(t):  # NumPy has no torch bfloat16: the same bytes, as integers of the same width
        return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]).numpy()

    g = torch.Generator().manual_seed(3)
    for dtype in DTYPES:
        for op in REDOPS:
            ref = {"sum": torch.add, "prod": torch.mul, "max": torch.maximum, "min": torch.minimum}[op]
            for n, offset in ((1, 0), (7, 0), (1000, 0), (1 << 20, 0), (1001, 1), (65537, 1)):
                a = torch.randint(-3, 4, (n + offset,), generator=g).to(dtype_of(dtype))
                b = torch.randint(-3, 4, (n + offset,), generator=g).to(dtype_of(dtype))
                da, db = DeviceArray.empty(n + offset, dtype, 0), DeviceArray.empty(n + offset, dtype, 0)
                da.copy_from(bits(a))
                db.copy_from(bits(b))
                _cuda.reduce_tensors(da[offset:], db[offset:], REDOPS[op])
                got = da.to_numpy()[offset:]
                assert (got.view(bits(a).dtype) == bits(ref(a[offset:], b[offset:]))).all(), (dtype, op, n, offset)


@pytest.mark.gpu
@needs_gpu
def test_reduction_kernel_matches_torch():
    in_own_process(_reduction_cases)


@pytest.mark.gpu
@needs_gpu
@on_hardware
@pytest.mark.parametrize("dtype,op,place", EXACT_CASES)
def test_device_allreduce_exact(dtype, op, place, workdir):
    out = os.path.join(workdir, "gpu.json")
    r = commbench([*exact_args(dtype, op, place), "-o", out], cwd=workdir)
    assert r.returncode == 0, r.stderr
    df = results.load(out)
    assert (df["wrong"] == 0).all() and set(df["impl"]) == {"nccl", "ring@nccl", "tree@nccl"}
    assert (df["ranks"] == GPUS).all()


@pytest.mark.gpu
@needs_gpu
@on_hardware
@pytest.mark.parametrize("name", COLLECTIVE_NAMES)
def test_every_collective_on_the_gpus(name, workdir):
    from commbench import collectives
    from commbench.transports import impls_for
    out = os.path.join(workdir, f"{name}.json")
    r = commbench([*collective_args(name), "-o", out], cwd=workdir)
    assert r.returncode == 0, r.stderr
    df = results.load(out)
    gpu_impls = {n for n, i in impls_for(collectives.get(name), "cuda").items() if i.transport.name == "nccl"}
    assert (df["wrong"] == 0).all() and set(df["impl"]) == gpu_impls and (df["ranks"] == GPUS).all()


@pytest.mark.gpu
@needs_gpu
def test_cuda_graph_mode(workdir):
    out = os.path.join(workdir, "graph.json")
    r = commbench([*GRAPH_ARGS, "-o", out], cwd=workdir)
    assert r.returncode == 0, r.stderr
    assert results.load(out).attrs["meta"]["config"]["graph"] is True


@pytest.mark.gpu
@pytest.mark.long  # the GPU pass's third longest (10-13 s): left to the end, one worker ran it alone
@needs_gpu
def test_peer_matrix_and_copies(workdir):
    r = commbench([*PEER_MATRIX_ARGS, "-o", os.path.join(workdir, "m.json")], cwd=workdir)
    assert r.returncode == 0, r.stderr
    assert "unidirectional ce bandwidth (GB/s)" in r.stdout and "bidirectional sm bandwidth" in r.stdout
    # The copies issued by the GPU that reads: their matrices alone, every byte in place.
    r = commbench([*PEER_READ_ARGS, "-o", os.path.join(workdir, "read.json")], cwd=workdir)
    assert r.returncode == 0, r.stderr
    assert "unidirectional ce-read bandwidth (GB/s)" in r.stdout and "unidirectional ce-read latency" in r.stdout
    assert "unidirectional ce bandwidth" not in r.stdout
    read = results.load(os.path.join(workdir, "read.json"))
    assert set(read["mode"]) == {"ce-read", "sm-read"} and (read["wrong"] == 0).all()
    out = os.path.join(workdir, "c.json")
    r = commbench([*COPY_ARGS, "-o", out], cwd=workdir)
    assert r.returncode == 0, r.stderr
    df = results.load(out)
    assert {"h2d", "d2h", "staged"} <= set(df["op"]) and (df["algbw_gbps"] > 0).all() and (df["wrong"] == 0).all()
    assert set(df["impl"]) == {"cuda"} and {"pinned", "pageable", "pinned2"} <= set(df["mode"])
    # Where the host buffers were allocated, said in the header and kept (NVML knows the GPU's CPUs).
    [placement] = results.load_document(out)["host_memory"]
    assert placement["local"] is True and f"# note: host buffers allocated from CPUs {placement['cpus']}, local" in r.stdout


def _copy_rigs():
    """Each copy class, driven directly: its untimed check finds every byte in place, on sizes that
    are no multiple of 16 bytes or of the staging chunk, and after timed iterations."""
    _cuda = cuda_module()
    other = 1 if visible_gpus()[0] > 1 else 0
    # Without peer access (a PCIe host without P2P) the copy engine's copies are staged through the
    # host by the driver; the SM's kernel cannot reach the other GPU and is refused.
    why = _cuda.peer_status(0, other)
    rigs = []
    for mode in ("ce", "sm"):
        for bidi in (False, True):
            if why and mode == "sm":
                with pytest.raises(ValueError, match="peer access between cuda:0 and cuda:1 is not supported"):
                    _cuda.PeerCopy(other, 0, 1000003, mode, bidi)
            else:
                rigs.append(_cuda.PeerCopy(other, 0, 1000003, mode, bidi))
    rigs += [_cuda.HostCopy(0, 1000003, d, pinned) for d in ("h2d", "d2h") for pinned in (True, False)]
    rigs += [_cuda.StagedCopy(other, 0, 1000003, 65536)]
    for rig in rigs:
        assert rig.wrong() == 0, rig
        assert min(rig.times(3)) > 0
        assert rig.wrong() == 0, rig


@pytest.mark.gpu
@needs_gpu
def test_every_copy_mode_delivers_the_pattern():
    in_own_process(_copy_rigs)


@pytest.mark.gpu
@needs_gpu
def test_device_identity_names_the_physical_gpu():
    _cuda = cuda_module()
    ids = [_cuda.device_identity(d) for d in range(GPUS)]
    for uuid, bus in ids:
        assert re.fullmatch(r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", uuid), uuid
        assert re.fullmatch(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]", bus), bus
    assert len({u for u, _ in ids}) == GPUS


@pytest.mark.gpu
@pytest.mark.skipif(GPUS < 2, reason="needs two GPUs")
def test_nccl_p2p_between_ranks(workdir):
    out = os.path.join(workdir, "p.json")
    r = commbench([*NCCL_P2P_ARGS, "-o", out], cwd=workdir)
    assert r.returncode == 0, r.stderr
    df = results.load(out)
    assert set(df["op"]) == {"pingpong", "bandwidth"} and (df["wrong"] == 0).all()


def test_peer_matrix_printout_marks_unsupported_pairs():
    from commbench.run.copies import print_matrices

    def rec(gbps, us, peer=True):
        return {"algbw_gbps": gbps, "time_us": {"median": us}, "peer_access": peer}
    no_peer = "peer access between cuda:0 and cuda:1 is not supported"
    # Without peer access the copy engine's cells are the driver's copies staged through the host.
    ce = {(0, 0): [rec(1.0, 2.0), rec(1500.0, 9.0)], (1, 1): [rec(1.0, 2.5), rec(1490.0, 9.0)],
          (0, 1): [rec(1.0, 11.0, False), rec(24.5, 50.0, False)], (1, 0): [rec(1.0, 12.0, False), rec(24.0, 50.0, False)]}
    sm = {(0, 0): [rec(1.0, 3.0), rec(1200.0, 9.0)], (1, 1): [rec(1.0, 3.0), rec(1210.0, 9.0)],
          (0, 1): no_peer, (1, 0): no_peer}
    lines = []
    print_matrices({("ce", False): ce, ("sm", False): sm}, 2, lines.append)
    text = "\n".join(lines)
    assert "# unidirectional ce bandwidth (GB/s), largest size" in text
    assert "#       0    1500.0     24.5s" in text
    assert "#       1       N/A    1210.0" in text
    assert "#       0      2.00    11.00s" in text  # latency from the smallest size
    assert text.count(f"# N/A: {no_peer}") == 1
    assert text.endswith("# s: no peer access: the driver staged the copy through host memory")


@pytest.mark.gpu
@needs_gpu
def test_cupy_buffers_for_cuda_aware_mpi(workdir):
    """The MPI library's calls on buffers CuPy allocated, checked like every other run: where CuPy is
    installed and the MPI library is CUDA-aware."""
    import importlib.util

    from commbench import _host
    if importlib.util.find_spec("cupy") is None or not _host.mpi_cuda_aware():
        pytest.skip("needs CuPy and a CUDA-aware MPI library")
    out = os.path.join(workdir, "cupy.json")
    r = commbench(["allgather", "--device", "cuda", "--impl", "mpi", "--buffers", "cupy", "--sizes", "4,1000,1M",
                   "--budget-ms", "20", "-o", out], cwd=workdir)
    assert r.returncode == 0, r.stderr
    df = results.load(out)
    assert (df["wrong"] == 0).all() and df.attrs["meta"]["config"]["buffers"] == "cupy"
