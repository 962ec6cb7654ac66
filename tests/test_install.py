"""`make install` as a user runs it: torch's CUDA build is chosen with TORCH_CUDA (a driver older than
PyPI torch's CUDA needs another build), checked on the Makefile itself with `make -n`; and `make
install-offline` where no package index answers."""

import os
import subprocess
import sys

import pytest
from conftest import ROOT


def _dry_install(tmp_path, *variables) -> str:
    r = subprocess.run(["make", "-n", "install", f"VENV={tmp_path / 'venv'}", *variables], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_torch_cuda_takes_torch_from_pytorchs_index_for_that_release(tmp_path):
    out = _dry_install(tmp_path, "TORCH_CUDA=cu128")
    assert ("pip install --no-compile --index-url https://download.pytorch.org/whl/cu128 "
            "--extra-index-url https://pypi.org/simple torch") in out
    # A venv whose torch is built for another CUDA gets it replaced.
    assert 'print("cu" + (torch.version.cuda or "").replace(".", ""))' in out and '!= "cu128"' in out
    assert "--force-reinstall --index-url https://download.pytorch.org/whl/cu128" in out


def test_without_torch_cuda_torch_comes_from_pypi(tmp_path):
    out = _dry_install(tmp_path)
    torch_lines = [line for line in out.splitlines() if "pip install" in line and line.rstrip().endswith(" torch")]
    assert torch_lines and all("download.pytorch.org" not in line for line in torch_lines), out


@pytest.mark.long
def test_offline_install_uses_the_machines_torch_and_no_index(tmp_path):
    """`make install-offline` where no package index answers: a venv on a Python whose torch (and the
    rest) is preinstalled, here the test venv's Python: itself a venv, as in images that keep torch in
    one (/opt/torch/.venv); only the host extension, unoptimised, to keep it short (the CUDA one
    compiles with the same flags)."""
    from test_wheel import _sources
    src, venv = tmp_path / "src", tmp_path / "venv"
    _sources(str(src))
    # The Open MPI that the test venv's mpi4py loads lives in that venv's lib/, where a Python whose
    # packages were installed into it would have it too.
    env = {**os.environ, "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_RETRIES": "0", "PIP_TIMEOUT": "2",
           "COMMBENCH_SKIP_CUDA": "1", "COMMBENCH_QUICK_BUILD": "1",
           "LD_LIBRARY_PATH": os.path.join(sys.prefix, "lib")}
    r = subprocess.run(["make", "install-offline", f"PYTHON={sys.executable}", f"VENV={venv}", f"WHEELS={tmp_path / 'wheels'}"], cwd=src,
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "127.0.0.1:9" not in r.stdout + r.stderr  # no index was asked
    r = subprocess.run([str(venv / "bin" / "commbench"), "version", "-v"], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path, env=env)
    assert r.returncode == 0 and "native host extension (commbench._host): built" in r.stdout, r.stdout + r.stderr
    r = subprocess.run([str(venv / "bin" / "python"), "-c", "import commbench; print(commbench.__file__)"],
                       capture_output=True, text=True, cwd=tmp_path, env=env)
    assert r.stdout.startswith(str(src)), r.stdout
