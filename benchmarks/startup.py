"""The fixed cost of a command, measured: whole-process wall times of a standalone 2-rank one-size
all-reduce (`commbench allreduce --device cpu --impl mpi --np 2 --sizes 1K --iters 20 --warmup 2
--no-fit`) beside the same run of OSU 7.4's `osu_allreduce` under the same bundled mpirun
(`-m 1024:1024 -i 20 -x 2`), at mpirun's defaults and with the Open MPI settings commbench's own
launch makes (launch/world.py: no libfabric BTL), interleaved, their medians and ratios; then the median time of each
phase of commbench's runs (COMMBENCH_TRACE_START=1, docs/method.md) and the wall time of the
commands that should take well under a second (version -v, topo, doctor, fit, compare and export of
the run's own small file).

    .venv/bin/python benchmarks/startup.py [--runs 5] [--osu-tar TAR] [--build-dir DIR]

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

from versus_osu import BIN, OSU, ROOT, build_osu, env, osu_exe

from commbench.launch.world import WITHOUT_LIBFABRIC

ONE_SIZE = ["allreduce", "--device", "cpu", "--impl", "mpi", "--np", "2", "--sizes", "1K", "--iters", "20",
            "--warmup", "2", "--no-fit"]
PHASE = re.compile(r"^# start (top|\d+) ([a-z-]+) (\d+)$")


def timed(argv: list, environ: dict, cwd: str) -> tuple[float, str]:
    start = time.perf_counter()
    r = subprocess.run(argv, capture_output=True, text=True, env=environ, cwd=cwd)
    seconds = time.perf_counter() - start
    if r.returncode != 0:
        sys.exit(f"startup: {' '.join(argv)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return seconds, r.stderr


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--osu-tar", default=os.path.join(ROOT, "..", "shared", "reference", f"{OSU}.tar.gz"))
    ap.add_argument("--build-dir", default=os.path.join(os.path.expanduser("~"), ".cache", "commbench-bench"))
    args = ap.parse_args()
    src = build_osu(args.osu_tar, args.build_dir)
    commbench = os.path.join(BIN, "commbench")
    base = env()
    traced = {**base, "COMMBENCH_TRACE_START": "1"}
    print(f"# load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {args.runs} runs, interleaved")
    same = {**base, **WITHOUT_LIBFABRIC}
    osu = [os.path.join(BIN, "mpirun"), "--np", "2", osu_exe(src, "osu_allreduce"), "-m", "1024:1024", "-i", "20",
           "-x", "2"]
    walls: dict[str, list[float]] = {"commbench": [], "osu": [], "osu-same": []}
    phases: dict[tuple[str, str], list[int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            seconds, err = timed([commbench, *ONE_SIZE, "-o", f"run{i}.json"], traced, tmp)
            walls["commbench"].append(seconds)
            for line in err.splitlines():
                m = PHASE.match(line)
                if m:
                    phases.setdefault((m.group(1), m.group(2)), []).append(int(m.group(3)))
            walls["osu"].append(timed(osu, base, tmp)[0])
            walls["osu-same"].append(timed(osu, same, tmp)[0])
        print(f"{'run':>6}  {'commbench (s)':>13}  {'osu_allreduce (s)':>17}  {'osu, same settings (s)':>22}")
        for i in range(args.runs):
            print(f"{i + 1:>6}  {walls['commbench'][i]:>13.2f}  {walls['osu'][i]:>17.2f}  {walls['osu-same'][i]:>22.2f}")
        cb, osu_default, osu_same = (statistics.median(walls[k]) for k in ("commbench", "osu", "osu-same"))
        print(f"median  {cb:>13.2f}  {osu_default:>17.2f}  {osu_same:>22.2f}")
        print(f"ratio   commbench / osu at mpirun's defaults {cb / osu_default:.2f}, "
              f"with commbench's launch settings ({' '.join(f'{k}={v}' for k, v in WITHOUT_LIBFABRIC.items())}) "
              f"{cb / osu_same:.2f}")
        print("# phases of commbench's runs, median ms since the command began")
        for (who, name), ms in phases.items():
            print(f"  {who:>4}  {name:<20} {statistics.median(ms):>6.0f}")
        print("# commands that read a small file or the node, wall seconds (median of the runs)")
        small = [["version", "-v"], ["topo"], ["doctor"], ["fit", "run0.json"], ["compare", "run0.json", "run1.json"],
                 ["export", "run0.json", "--format", "csv"]]
        for argv in small:
            # doctor and compare exit 1 on what they find: their time is what counts here.
            times = []
            for _ in range(args.runs):
                start = time.perf_counter()
                subprocess.run([commbench, *argv], capture_output=True, env=base, cwd=tmp)
                times.append(time.perf_counter() - start)
            print(f"  {' '.join(argv):<32} {statistics.median(times):>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
