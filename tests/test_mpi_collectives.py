"""Ring, tree and MPI all-reduce against a float64 reference, under the bundled mpirun."""

import os

import pytest

from conftest import HERE, mpirun
import sys

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("ranks", [1, 2, 3, 4, 5])
def test_allreduce_matrix_is_exact(ranks):
    r = mpirun(ranks, [sys.executable, os.path.join(HERE, "mpi_correctness.py")], timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    fails = [l for l in r.stdout.splitlines() if l.startswith("FAIL")]
    assert not fails, "\n".join(fails[:20])
    # 3 impls x 6 dtypes x 4 ops x 8 counts x 2 placements, the tree at 2 chunk sizes.
    assert f"CHECKED {4 * 6 * 4 * 8 * 2}" in r.stdout
