"""Which CUDA compiler may build commbench._cuda, and why none may.

torch's extension builder refuses a toolkit whose major release differs from the CUDA that torch was
built with, and that refusal used to abort the whole install. So the build picks a compiler whose
release matches torch's: first the one that pip installs into this environment (the
nvidia-cuda-nvcc wheel, under site-packages/nvidia/cuNN, which `make install` pins to torch's
release), then $CUDA_HOME, /usr/local/cuda and the nvcc on PATH. When none matches, only the host
extension is built and the reason is kept in BUILD_INFO for `commbench version -v`.

Standard library only: setup.py loads this file by path before the package exists.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
from typing import Optional, Sequence

# In the package's top folder, beside the extensions it describes (package data of the wheel).
BUILD_INFO = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_build_info.json")


def nvcc_release(home: str) -> Optional[str]:
    """'13.0' from `HOME/bin/nvcc --version`, or None when it does not run or says no release."""
    try:
        out = subprocess.run([os.path.join(home, "bin", "nvcc"), "--version"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release (\d+)\.(\d+)", out)
    return f"{m.group(1)}.{m.group(2)}" if m else None


SYSTEM_HOMES = ("/usr/local/cuda",)


def candidate_homes(torch_cuda: str, site_dirs: list[str], env: dict,
                    system_homes: tuple[str, ...] = SYSTEM_HOMES) -> list[tuple[str, str]]:
    """(toolkit home, where it came from) in order of preference, each holding an executable nvcc."""
    major = torch_cuda.split(".")[0]
    found = [(os.path.join(d, "nvidia", f"cu{major}"), "the nvidia-cuda-nvcc wheel") for d in site_dirs]
    if env.get("CUDA_HOME"):
        found.append((env["CUDA_HOME"], "$CUDA_HOME"))
    found += [(home, home) for home in system_homes]
    nvcc = shutil.which("nvcc", path=env.get("PATH"))
    if nvcc:
        found.append((os.path.dirname(os.path.dirname(os.path.realpath(nvcc))), "nvcc on PATH"))
    usable, seen = [], set()
    for home, origin in found:
        real = os.path.realpath(home)
        if real not in seen and os.access(os.path.join(home, "bin", "nvcc"), os.X_OK):
            seen.add(real)
            usable.append((home, origin))
    return usable


def choose(torch_cuda: Optional[str], site_dirs: list[str], env: dict,
           system_homes: tuple[str, ...] = SYSTEM_HOMES) -> tuple[Optional[str], str]:
    """(toolkit home, what was chosen) or (None, why commbench._cuda cannot be built). A home of the
    same major.minor release as torch wins over one that shares only the major release, which
    torch's builder accepts; another major release is never chosen."""
    if env.get("COMMBENCH_SKIP_CUDA") == "1":
        return None, "COMMBENCH_SKIP_CUDA=1 was set when commbench was installed"
    if not torch_cuda:
        return None, "torch is a CPU build"
    homes = candidate_homes(torch_cuda, site_dirs, env, system_homes)
    if not homes:
        return None, (f"no CUDA compiler found for torch's CUDA {torch_cuda}; `make install` installs "
                      f"nvidia-cuda-nvcc=={torch_cuda}.* into the environment")
    releases = [(home, origin, nvcc_release(home)) for home, origin in homes]
    for same in (lambda r: r == torch_cuda, lambda r: r.split(".")[0] == torch_cuda.split(".")[0]):
        for home, origin, release in releases:
            if release and same(release):
                return home, f"nvcc {release} from {origin} ({home})"
    seen = ", ".join(f"{release or 'unknown'} at {home}" for home, _, release in releases)
    return None, (f"no nvcc matches torch's CUDA {torch_cuda} (found {seen}); install "
                  f"nvidia-cuda-nvcc=={torch_cuda}.* into this environment (`make install` does)")


def cudart_link_dir(home: str, build_dir: str) -> Optional[str]:
    """torch links `-lcudart`, but the CUDA wheels ship only libcudart.so.NN: a folder holding the
    unversioned name for the linker, or None when the toolkit has it already."""
    libs = [os.path.join(home, d) for d in ("lib64", "lib")]
    if any(os.path.exists(os.path.join(d, "libcudart.so")) for d in libs):
        return None
    versioned = sorted(p for d in libs for p in glob.glob(os.path.join(d, "libcudart.so.*")))
    if not versioned:
        return None
    os.makedirs(build_dir, exist_ok=True)
    link = os.path.join(build_dir, "libcudart.so")
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(versioned[0], link)
    return build_dir


def write_build_info(cuda_built: bool, detail: str, libraries: Sequence[str] = ()) -> None:
    """`libraries`: the files of the CUDA runtime and NCCL that commbench._cuda was linked against,
    which node/gpu.py loads before it."""
    with open(BUILD_INFO, "w") as f:
        json.dump({"cuda": {"built": cuda_built, "detail": detail, "libraries": list(libraries)}}, f)


def read_build_info() -> dict:
    """What the last build recorded, or {} for a tree that was never built."""
    try:
        with open(BUILD_INFO) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}
