"""Shared helpers: run commbench and Python under the bundled mpirun, as a user would."""

import os
import subprocess
import sys

import pytest

BIN = os.path.dirname(sys.executable)
COMMBENCH = os.path.join(BIN, "commbench")
MPIRUN = os.path.join(BIN, "mpirun")
HERE = os.path.dirname(os.path.abspath(__file__))


def mpi_env() -> dict:
    env = dict(os.environ)
    for var in [v for v in env if v.startswith(("OMPI_COMM_WORLD", "PMIX_", "PMI_")) or v in ("RANK", "WORLD_SIZE")]:
        del env[var]
    if os.geteuid() == 0:
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    return env


def mpirun(n: int, args: list, timeout: float = 300, cwd=None) -> subprocess.CompletedProcess:
    extra = ["--oversubscribe", "--bind-to", "none"] if n > (os.cpu_count() or 1) else []
    return subprocess.run([MPIRUN, "--np", str(n), *extra, *args], capture_output=True, text=True,
                          timeout=timeout, env=mpi_env(), cwd=cwd)


def commbench(args: list, timeout: float = 300, cwd=None, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([COMMBENCH, *args], capture_output=True, text=True, timeout=timeout,
                          env=env or mpi_env(), cwd=cwd)


@pytest.fixture
def workdir(tmp_path):
    return str(tmp_path)
