"""How the analysis commands scale with the records of a result file: fit, compare, report, plot,
export (CSV) and fleet on synthesized files of N records, timed as a user runs them (wall seconds and peak
memory of the command). A fleet hands commbench tens of thousands of records; the target is
100,000 records in under 10 s for each command.

    .venv/bin/python benchmarks/records.py [--counts 1000,10000,100000] [--limit-s 120] [--shape series|sizes]
        [--samples 5] [--commands fit,compare,...]

Two shapes of file: `series` (the records of many series of 20 sizes each: a fleet's runs side by
side) and `sizes` (one series of N sizes: a long nccl-tests log, imported). --samples: the samples
each record keeps (5; a run of 2,000 iterations a size keeps 2,000, and the largest file commbench
writes itself is 10,000 sizes of them: `--shape sizes --counts 10000 --samples 2000`). A command past
--limit-s is stopped and reported as such. Prints one table row per (shape, N, command).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

from docs import record, result_doc  # noqa: E402  (tests/docs.py: records as a run makes them)

COMMANDS = {
    "fit": lambda f, out: ["fit", f],
    "compare": lambda f, out: ["compare", f, f],
    "report": lambda f, out: ["report", f, "-o", out],
    "plot": lambda f, out: ["plot", f, "-o", out + ".png"],
    "export csv": lambda f, out: ["export", f, "--format", "csv", "-o", out + ".csv"],
    "fleet": lambda f, out: ["fleet", f],
}


def synthesize(n: int, shape: str, path: str, samples: int = 5) -> None:
    """n records of a 2-rank-and-up ring all-reduce (t = 5 us + n / 5 GB/s, `samples` samples within 2 %)."""
    rng = np.random.default_rng(1)
    if shape == "series":
        plan = [(2 + i // 20, 1 << (10 + i % 20)) for i in range(n)]
    else:
        plan = [(2, 8 * (i + 1)) for i in range(n)]
    recs = [record("allreduce", "ring@mpi", "float32", "sum", ranks, size, size // 4,
                   (5 + size / 5e3) * rng.uniform(0.98, 1.02, samples) * 1e-6, 0) for ranks, size in plan]
    with open(path, "w") as f:
        json.dump(result_doc(recs), f)


def timed(argv: list, limit_s: float) -> tuple:
    """(wall seconds, or None past the limit; peak resident MiB; exit status) of one command."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = t0 + limit_s
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            p.returncode = os.waitstatus_to_exitcode(status)
            return time.perf_counter() - t0, usage.ru_maxrss / 1024, p.returncode
        if time.perf_counter() > deadline:
            p.kill()
            p.wait()
            return None, None, None
        time.sleep(0.02)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="1000,10000,100000")
    parser.add_argument("--limit-s", type=float, default=120.0)
    parser.add_argument("--shape", default="series,sizes")
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--commands", default=",".join(COMMANDS))
    parser.add_argument("--write", help=argparse.SUPPRESS)  # the file of --counts records of --shape, alone
    args = parser.parse_args()
    if args.write:
        synthesize(int(args.counts), args.shape, args.write, args.samples)
        return 0
    commbench = os.path.join(os.path.dirname(sys.executable), "commbench")
    print(f"{'shape':<8}{'records':>9}  {'command':<12}{'seconds':>9}{'peak MiB':>10}  target (< 10 s at 100,000)")
    with tempfile.TemporaryDirectory() as tmp:
        for shape in args.shape.split(","):
            for n in (int(c) for c in args.counts.split(",")):
                path = os.path.join(tmp, f"{shape}-{n}.json")
                # In a process of its own: a command's peak memory (its rusage) counts this process's
                # as it forks, and the records made here took more than the command itself.
                subprocess.run([sys.executable, __file__, "--write", path, "--shape", shape, "--counts", str(n),
                                "--samples", str(args.samples)], check=True)
                print(f"# {path}: {os.path.getsize(path) / 2**20:.0f} MiB, {args.samples} samples a record", flush=True)
                for name in args.commands.split(","):
                    make = COMMANDS[name]
                    wall, peak, rc = timed([commbench, *make(path, os.path.join(tmp, f"{shape}-{n}-{name[:3]}"))],
                                           args.limit_s)
                    seconds = f"> {args.limit_s:g}" if wall is None else f"{wall:.2f}"
                    mib = "" if peak is None else f"{peak:.0f}"
                    note = "" if rc in (0, 1, None) else f"exit {rc}"
                    print(f"{shape:<8}{n:>9}  {name:<12}{seconds:>9}{mib:>10}  {note}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
