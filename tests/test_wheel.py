"""A wheel carries the whole package: every module and every data file (the result schema, the fabric
catalog, the build record), so that an install outside the development checkout works. Builds the
host extension once, without the CUDA extension and without optimisation (COMMBENCH_QUICK_BUILD:
what is checked here is what the wheel carries and that it runs, and -O0 halves the compile)."""

import glob
import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest
from conftest import ROOT

from docs import ring_run

pytestmark = pytest.mark.wheel


def _sources(dest: str) -> None:
    """The checkout's files as git sees them (tracked or new, never ignored build outputs), copied to
    dest: building in the checkout would write build/ and commbench/_build_info.json under the
    editable install that every other test uses."""
    listed = subprocess.run(["git", "-C", ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, text=True, check=True).stdout.split("\0")
    for rel in filter(None, listed):
        src = os.path.join(ROOT, rel)
        if os.path.isfile(src):  # a file deleted in the working tree stays listed until committed
            os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
            shutil.copy2(src, os.path.join(dest, rel))


def test_wheel_installs_and_runs_outside_the_checkout(tmp_path):
    src, wheels, site, elsewhere = (str(tmp_path / d) for d in ("src", "wheels", "site", "elsewhere"))
    _sources(src)
    env = {**os.environ, "COMMBENCH_SKIP_CUDA": "1", "COMMBENCH_QUICK_BUILD": "1"}
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w", wheels, src],
                           capture_output=True, text=True, env=env, timeout=1200)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    [wheel] = glob.glob(os.path.join(wheels, "commbench-*.whl"))

    names = set(zipfile.ZipFile(wheel).namelist())
    package = os.path.join(src, "commbench")
    shipped = {os.path.relpath(os.path.join(d, n), src) for d, _, files in os.walk(package) for n in files
               if n.endswith((".py", ".json")) and "__pycache__" not in d}
    assert "commbench/_build_info.json" in shipped and "commbench/fabrics.json" in shipped
    assert sorted(shipped - names) == []
    assert any(n.startswith("commbench/_host") for n in names)
    assert any(n.startswith("commbench/_nccl_choices") for n in names)  # NCCL's profiler plugin

    install = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--target", site, wheel],
                             capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr[-3000:]
    os.makedirs(elsewhere)
    run_env = {**env, "PYTHONPATH": site}

    def run(*args):
        return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=elsewhere, env=run_env,
                              timeout=300)

    where = run("-c", "import commbench; print(commbench.__file__)")
    assert where.stdout.strip() == os.path.join(site, "commbench", "__init__.py"), where.stderr
    fabrics = run("-m", "commbench", "fabrics")
    assert fabrics.returncode == 0 and "nvlink4" in fabrics.stdout, fabrics.stderr
    with open(os.path.join(elsewhere, "run.json"), "w") as f:
        json.dump(ring_run(), f)
    fitted = run("-m", "commbench", "fit", "run.json", "--fabric", "nvlink4")  # the schema and the catalog
    assert fitted.returncode == 0 and "for nvlink4" in fitted.stdout, fitted.stderr
