"""The side-by-side benchmarks' own plumbing (benchmarks/): what they launch, checked where it runs
without a GPU or OSU."""

import os
import subprocess
import sys
import time

from conftest import ROOT, mpi_env, mpirun

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import beside_nccl_tests  # noqa: E402
import gpu_figures  # noqa: E402

SHOW = ["sh", "-c", 'echo "$OMPI_COMM_WORLD_RANK $NCCL_HOSTID $NCCL_TESTS_DEVICE $NCCL_NET $NCCL_SOCKET_IFNAME '
        '$NCCL_P2P_DISABLE $NCCL_SHM_DISABLE"']


def test_nccl_tests_ranks_share_the_gpus_as_commbench_ranks_do():
    """3 ranks on 2 GPUs: each nccl-tests rank poses as a host of its own and takes the GPU of its local
    rank mod 2 (nccl-tests alone would take GPU 2 for rank 2), over the socket transport on loopback
    that COMMBENCH_SHARED_GPU gives commbench's ranks."""
    extra, prefix = beside_nccl_tests.shared_launch(3, 2)
    r = mpirun(3, [*prefix, *SHOW], env={**mpi_env(), **extra}, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = sorted(line.split() for line in r.stdout.splitlines())
    assert rows == [[str(rank), f"nccl-tests-shared-rank{rank}", str(rank % 2), "Socket", "lo", "1", "1"]
                    for rank in range(3)]


def test_ranks_with_a_gpu_each_are_launched_as_nccl_tests_expects():
    assert beside_nccl_tests.shared_launch(2, 2) == ({}, [])
    assert beside_nccl_tests.shared_launch(1, 8) == ({}, [])


def test_the_fleet_benchmark_times_the_command_and_checks_what_it_named():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "fleet.py"), "--nodes", "30", "--repeat", "1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("# 30 node files written in ") and lines[0].endswith("target 10 s per fleet run")
    assert lines[2].split()[0] == "1" and lines[2].endswith("exactly the planted"), r.stdout


def test_a_gpu_loans_checks_keep_their_limits_and_the_budget(tmp_path):
    """benchmarks/gpu_figures.py: a check's exit status and the lines worth reading reach figures.txt;
    one past its limit is stopped with everything it started; none starts once the budget is spent."""
    loan = gpu_figures.Loan(str(tmp_path / "out"), budget_s=20)
    assert loan.check("quick", 5, ["sh", "-c", "echo '# impl nccl: x'; echo noise; echo 'commbench: error: y'; exit 3"]) == 3
    t0 = time.monotonic()
    assert loan.check("slow", 1, ["sh", "-c", "sleep 30 & echo $! > child; wait"]) is None
    assert time.monotonic() - t0 < 8
    child = int((tmp_path / "out" / "child").read_text())
    time.sleep(0.2)
    assert not os.path.exists(f"/proc/{child}") or open(f"/proc/{child}/stat").read().split()[2] == "Z"
    loan.budget_s = 0
    assert loan.check("late", 5, ["true"]) is None
    loan.summary.close()
    lines = (tmp_path / "out" / "figures.txt").read_text().splitlines()
    assert lines[0].startswith("== quick: exit 3, ") and lines[1:3] == ["   # impl nccl: x", "   commbench: error: y"]
    assert lines[3].startswith("== slow: stopped at its limit, ") and lines[-1] == "late: not run, the budget is spent"
    assert (tmp_path / "out" / "quick.log").read_text().startswith("$ sh -c ")
