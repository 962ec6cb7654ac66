"""`make install` as a user runs it: torch's CUDA build is chosen with TORCH_CUDA (a driver older than
PyPI torch's CUDA needs another build), checked on the Makefile itself with `make -n`."""

import subprocess

from conftest import ROOT


def _dry_install(tmp_path, *variables) -> str:
    r = subprocess.run(["make", "-n", "install", f"VENV={tmp_path / 'venv'}", *variables], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_torch_cuda_takes_torch_from_pytorchs_index_for_that_release(tmp_path):
    out = _dry_install(tmp_path, "TORCH_CUDA=cu128")
    assert "pip install --index-url https://download.pytorch.org/whl/cu128 --extra-index-url https://pypi.org/simple torch" in out
    # A venv whose torch is built for another CUDA gets it replaced.
    assert 'print("cu" + (torch.version.cuda or "").replace(".", ""))' in out and '!= "cu128"' in out
    assert "--force-reinstall --index-url https://download.pytorch.org/whl/cu128" in out


def test_without_torch_cuda_torch_comes_from_pypi(tmp_path):
    out = _dry_install(tmp_path)
    torch_lines = [line for line in out.splitlines() if "pip install" in line and line.rstrip().endswith(" torch")]
    assert torch_lines and all("download.pytorch.org" not in line for line in torch_lines), out
