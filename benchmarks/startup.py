"""The fixed cost of a command, measured: whole-process wall times of a standalone 2-rank one-size
all-reduce (`commbench allreduce --device cpu --impl mpi --np 2 --sizes 1K --iters 20 --warmup 2
--no-fit`) beside the same run of OSU 7.4's `osu_allreduce` under the same bundled mpirun
(`-m 1024:1024 -i 20 -x 2`), at mpirun's defaults and with the Open MPI settings commbench's own
launch makes (launch/world.py: no libfabric BTL), interleaved, their medians and ratios; then the median time of each
phase of commbench's runs (COMMBENCH_TRACE_START=1, docs/method.md) and the wall time of the
commands that should take well under a second (version -v, topo, doctor, fit, compare and export of
the run's own small file).

    .venv/bin/python benchmarks/startup.py [--runs 5] [--osu-tar TAR] [--nccl-tests-tar TAR] [--build-dir DIR]

OSU is built as benchmarks/versus_osu.py builds it (outside the repository, once). Run it on a quiet
machine: the script prints the load average before it starts.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from beside_nccl_tests import build as build_nccl_tests
from beside_nccl_tests import gpu_count, nccl_library_env
from versus_osu import BIN, OSU, ROOT, build_osu, env, osu_exe

from commbench.launch.world import WITHOUT_LIBFABRIC

CPU_RUN = ["allreduce", "--device", "cpu", "--impl", "mpi", "--np", "2", "--sizes", "1K", "--iters", "20",
           "--warmup", "2", "--no-fit"]
GPU_RUN = ["allreduce", "--device", "cuda", "--impl", "nccl", "--np", "1", "--sizes", "1K", "--iters", "20",
           "--warmup", "2", "--no-fit"]
PHASE = re.compile(r"^# start (top|\d+) ([a-z-]+) (\d+)$")


def timed(argv: list, environ: dict, cwd: str) -> tuple[float, str]:
    start = time.perf_counter()
    r = subprocess.run(argv, capture_output=True, text=True, env=environ, cwd=cwd)
    seconds = time.perf_counter() - start
    if r.returncode != 0:
        sys.exit(f"startup: {' '.join(argv)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return seconds, r.stderr


def side_by_side(ours: list, theirs: dict, runs: int, base: dict, tmp: str, stem: str) -> None:
    """commbench `ours` (its result files STEM<i>.json in tmp) beside each of `theirs` ({label: (argv,
    environment)}), interleaved: every run's wall seconds, the medians and ratios, then the median of
    each phase of commbench's runs."""
    walls: dict[str, list[float]] = {"commbench": [], **{label: [] for label in theirs}}
    phases: dict[tuple[str, str], list[int]] = {}
    for i in range(runs):
        seconds, err = timed([os.path.join(BIN, "commbench"), *ours, "-o", f"{stem}{i}.json"],
                             {**base, "COMMBENCH_TRACE_START": "1"}, tmp)
        walls["commbench"].append(seconds)
        for line in err.splitlines():
            m = PHASE.match(line)
            if m:
                phases.setdefault((m.group(1), m.group(2)), []).append(int(m.group(3)))
        for label, (argv, environ) in theirs.items():
            walls[label].append(timed(argv, environ, tmp)[0])
    print(f"# commbench {' '.join(ours)}")
    print("   run  " + "  ".join(f"{label + ' (s)':>{max(len(label) + 4, 14)}}" for label in walls))
    for i in range(runs):
        print(f"{i + 1:>6}  " + "  ".join(f"{walls[label][i]:>{max(len(label) + 4, 14)}.2f}" for label in walls))
    medians = {label: statistics.median(times) for label, times in walls.items()}
    print("median  " + "  ".join(f"{medians[label]:>{max(len(label) + 4, 14)}.2f}" for label in walls))
    for label in theirs:
        print(f"ratio   commbench / {label}: {medians['commbench'] / medians[label]:.2f}")
    print("# phases of commbench's runs, median ms since the command began")
    for (who, name), ms in phases.items():
        print(f"  {who:>4}  {name:<20} {statistics.median(ms):>6.0f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--osu-tar", default=os.path.join(ROOT, "..", "shared", "reference", f"{OSU}.tar.gz"))
    ap.add_argument("--nccl-tests-tar", default=os.path.join(ROOT, "..", "shared", "reference", "nccl-tests-2.19.6.tar.gz"))
    ap.add_argument("--build-dir", default=os.path.join(os.path.expanduser("~"), ".cache", "commbench-bench"))
    args = ap.parse_args()
    src = build_osu(args.osu_tar, args.build_dir)
    mpirun = os.path.join(BIN, "mpirun")
    base = env()
    print(f"# load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {args.runs} runs, interleaved")
    osu = [mpirun, "--np", "2", osu_exe(src, "osu_allreduce"), "-m", "1024:1024", "-i", "20", "-x", "2"]
    settings = " ".join(f"{k}={v}" for k, v in WITHOUT_LIBFABRIC.items())
    with tempfile.TemporaryDirectory() as tmp:
        side_by_side(CPU_RUN, {"osu_allreduce": (osu, base),
                               f"osu_allreduce, {settings}": (osu, {**base, **WITHOUT_LIBFABRIC})},
                     args.runs, base, tmp, "run")
        if gpu_count():
            nccl_tests = os.path.join(build_nccl_tests(args.nccl_tests_tar, args.build_dir, _run), "all_reduce_perf_mpi")
            theirs = [mpirun, "--np", "1", nccl_tests, "-b", "1K", "-e", "1K", "-g", "1", "-n", "20", "-w", "2"]
            side_by_side(GPU_RUN, {"all_reduce_perf": (theirs, {**base, **WITHOUT_LIBFABRIC, **nccl_library_env(base)})},
                         args.runs, base, tmp, "gpu")
        print("# commands that read a small file or the node, wall seconds (median of the runs)")
        small = [["version", "-v"], ["topo"], ["doctor"], ["fit", "run0.json"], ["compare", "run0.json", "run1.json"],
                 ["export", "run0.json", "--format", "csv"]]
        for argv in small:
            # doctor and compare exit 1 on what they find: their time is what counts here.
            times = []
            for _ in range(args.runs):
                start = time.perf_counter()
                subprocess.run([os.path.join(BIN, "commbench"), *argv], capture_output=True, env=base, cwd=tmp)
                times.append(time.perf_counter() - start)
            print(f"  {' '.join(argv):<32} {statistics.median(times):>6.2f}")
    return 0


def _run(argv: list, environ=None) -> str:
    r = subprocess.run(argv, capture_output=True, text=True, env=environ or env())
    if r.returncode != 0:
        sys.exit(f"startup: {' '.join(argv)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return r.stdout


if __name__ == "__main__":
    sys.exit(main())
