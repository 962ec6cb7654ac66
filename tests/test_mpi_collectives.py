"""Every collective by every CPU impl against a float64 reference, under the bundled mpirun."""

import os
import sys

import pytest
from conftest import HERE, mpirun

from commbench import collectives
from commbench.collectives.base import PIPELINED
from commbench.collectives.dtypes import DTYPES, REDOPS
from commbench.transports import impls_for
from commbench.transports.gloo import GLOO

pytestmark = pytest.mark.mpi

# gloo's calls are the library's own: its views, roots and placements are commbench's to check, on an
# even and an uneven rank count; each gloo rank loads torch (seconds of its start) and waits on TCP.
GLOO_RANKS = (2, 3)


def expected_cases(ranks: int) -> int:
    """Collective x CPU impl (the tree and the chain at two chunk sizes) x dtype x reduction x 8 counts x
    placements: what mpi_correctness.py must have checked on `ranks` ranks."""
    total = 0
    for coll in collectives.all_collectives():
        variants = sum(2 if impl.algorithm in PIPELINED else 1 for impl in impls_for(coll, "cpu").values()
                       if ranks in GLOO_RANKS or impl.transport is not GLOO)
        dtypes = len(DTYPES) if ranks <= 2 else 3  # mpi_correctness.CHECKED_DTYPES
        total += variants * dtypes * (len(REDOPS) if coll.reduces else 1) * 8 * (2 if coll.in_place else 1)
    return total


# Up to 4 ranks on 2 cores: 3 is the uneven count (a partial tree, blocks the ranks do not divide).
@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_every_collective_is_exact(ranks):
    gloo = [] if ranks in GLOO_RANKS else ["--no-gloo"]
    r = mpirun(ranks, [sys.executable, os.path.join(HERE, "mpi_correctness.py"), *gloo], timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    fails = [line for line in r.stdout.splitlines() if line.startswith("FAIL")]
    assert not fails, "\n".join(fails[:20])
    assert f"CHECKED {expected_cases(ranks)}" in r.stdout
    assert expected_cases(ranks) > 2000  # every collective, not one
