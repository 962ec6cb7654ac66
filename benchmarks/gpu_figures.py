"""The hardware figures docs/gpus.md cites, measured on a GPU node in one time-boxed run: what a short
loan of a GPU machine without a package index can hold. Each check runs under its own time limit and
all of them within --budget seconds, the most wanted first; a check that fails or overruns is logged
and the next one runs.

    python3 benchmarks/gpu_figures.py --out DIR [--wheels wheels] [--reference DIR] [--budget 450]

It makes the venv (`make install-offline`, the packages the machine lacks from --wheels) unless
.venv/bin/commbench exists, builds OSU 7.4 and nccl-tests 2.19 from --reference's tarballs in the
background (outside the repository), then runs, in this order:

- the node's facts (nvidia-smi, the CPU and NUMA layout) and `version -v`, `topo`, `doctor`;
- NCCL's choice per size on one rank (its profiler plugin loaded by the real NCCL: the algo/proto
  column), then its Ring/Tree and protocol variants on 2 and 3 ranks sharing the GPU
  (COMMBENCH_SHARED_GPU), where NCCL chooses between them over sockets, NVLS among them (refused);
- `accept --plan gpu-node --quick`, beside its --dry-run estimates;
- benchmarks/startup.py (the phases of a command's start, beside nccl-tests' all_reduce_perf) and
  benchmarks/versus_osu.py --gpu-only (loop timing beside nccl-tests at equal -n and -w);
- an NCCL initialisation that fails (a socket interface that does not exist): the error line with
  NCCL's WARN, and no log file left behind;
- the ranks' release spread: per-iteration against loop timing on 3 ranks sharing the GPU;
- `scale` on 3 ranks sharing the GPU (communicators split from the parent, destroyed at the end);
- `allreduce --sizes 1K-1G` as a new user types it, its wall time and its start's phases;
- copies (host and device memory bandwidth) and the peer matrix's bidirectional figures;
- the GPU tests (`pytest -m gpu tests/test_gpu.py`), with what is left of the budget.

Every check's output goes to DIR/<check>.log and its result files beside it; DIR/figures.txt has one
line per check (exit status, seconds) and the lines worth reading at once. DIR.tar.gz holds it all.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
VENV_BIN = os.path.join(ROOT, ".venv", "bin")
COMMBENCH = os.path.join(VENV_BIN, "commbench")
BUILD_DIR = "/tmp/commbench-bench"
SHARED = {"COMMBENCH_SHARED_GPU": "1"}
# The lines of a log worth reading at once in figures.txt.
WORTH = re.compile(r"commbench: error|^# start |^# accept |^(PASS|FAIL|WARN|ERROR|TIMEOUT|pass) |default slower|"
                   r"NCCL's default|^#   \d|refused|NCCL WARN|PROFILER/Plugin|profiler plugin|\d+ passed|\d+ failed|"
                   r"^# impl |^#   rank \d|^exit |^left: |[Aa]ffinity|bound to")


class Loan:
    """The run's clock, budget and output folder."""

    def __init__(self, out: str, budget_s: float):
        self.out, self.budget_s, self.start = out, budget_s, time.monotonic()
        os.makedirs(out, exist_ok=True)
        self.summary = open(os.path.join(out, "figures.txt"), "a")
        self.env = dict(os.environ)
        if os.geteuid() == 0:  # a lent machine runs its commands as root
            self.env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        self.env["PYTHONUNBUFFERED"] = "1"

    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.start)

    def say(self, line: str) -> None:
        print(line, flush=True)
        self.summary.write(line + "\n")
        self.summary.flush()

    def check(self, name: str, limit_s: float, argv: list, env: dict | None = None, worth: int = 40,
              every: bool = False) -> int | None:
        """Runs argv into <name>.log within min(limit_s, what the budget has left); says its exit status
        and seconds, then the last `worth` of its lines worth reading (`every`: of all its lines, for a
        script that prints a summary). None: not run or stopped."""
        if self.left() < 5:
            self.say(f"{name}: not run, the budget is spent")
            return None
        limit = min(limit_s, self.left())
        log = os.path.join(self.out, f"{name}.log")
        t0 = time.monotonic()
        with open(log, "w") as f:
            f.write(f"$ {' '.join(argv)}\n")
            f.flush()
            p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env={**self.env, **(env or {})},
                                 cwd=self.out, start_new_session=True)
            try:
                rc: int | None = p.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, 15)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, 9)
                    p.wait()
                rc = None
        self.say(f"== {name}: {'stopped at its limit' if rc is None else f'exit {rc}'}, {time.monotonic() - t0:.1f} s")
        with open(log, errors="replace") as f:
            next(f)  # the command line
            lines = [line.rstrip() for line in f if every or WORTH.search(line)]
        for line in lines[-worth:]:
            self.say(f"   {line[:220]}")
        return rc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder of the logs and result files (made; DIR.tar.gz beside it)")
    ap.add_argument("--wheels", default=os.path.join(ROOT, "wheels"), help="what the machine lacks, for install-offline")
    ap.add_argument("--reference", default=os.path.join(ROOT, "..", "shared", "reference"),
                    help="folder of osu-micro-benchmarks-7.4.tar.gz and nccl-tests-2.19.6.tar.gz")
    ap.add_argument("--budget", type=float, default=450, help="seconds for everything, the install included")
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    loan = Loan(out, args.budget)
    ref = os.path.abspath(args.reference)
    osu_tar, nccl_tests_tar = (os.path.join(ref, n) for n in ("osu-micro-benchmarks-7.4.tar.gz", "nccl-tests-2.19.6.tar.gz"))

    loan.check("facts", 30, ["sh", "-c", "nvidia-smi; nvidia-smi topo -m; lscpu; nproc; "
                                         "python3 -c 'import torch; print(torch.__version__, torch.version.cuda)'"], worth=0)
    if not os.path.exists(COMMBENCH):
        loan.check("install", 240, ["make", "-C", ROOT, "install-offline", "PYTHON=python3",
                                    f"WHEELS={os.path.abspath(args.wheels)}"], worth=5)
    if not os.path.exists(COMMBENCH):
        loan.say("no commbench: the install failed (install.log)")
        return 1
    python = os.path.join(VENV_BIN, "python")
    # OSU and nccl-tests build beside the first checks (16 cores); the comparisons wait for them.
    builds = subprocess.Popen([python, os.path.join(HERE, "versus_osu.py"), "--build-only", "--osu-tar", osu_tar,
                               "--nccl-tests-tar", nccl_tests_tar, "--build-dir", BUILD_DIR],
                              stdout=open(os.path.join(out, "builds.log"), "w"), stderr=subprocess.STDOUT, env=loan.env,
                              start_new_session=True)  # make and the compilers with it, stopped as one
    cb = [COMMBENCH]
    loan.check("version", 60, [*cb, "version", "-v"], worth=0)
    loan.check("topo", 60, [*cb, "topo"], worth=0)
    loan.check("doctor", 60, [*cb, "doctor"])
    # NCCL's choice, as NCCL reports it through the profiler plugin (NCCL_DEBUG says it loaded it).
    loan.check("choice-1-rank", 60, [*cb, "allreduce", "--device", "cuda", "--impl", "nccl", "--sizes", "1K-1G:x4",
                                     "-o", "choice-1.json"], env={"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV"})
    for ranks in (2, 3):
        loan.check(f"variants-{ranks}-ranks", 90, [*cb, "allreduce", "--device", "cuda", "--np", str(ranks),
                                                   "--impl", "nccl", "--nccl-algo", "ring,tree,nvls",
                                                   "--nccl-proto", "ll,ll128,simple", "--sizes", "1K-64M:x8",
                                                   "--budget-ms", "20", "-o", f"variants-{ranks}.json"], env=SHARED)
    loan.check("accept-dry-run", 30, [*cb, "accept", "--plan", "gpu-node", "--quick", "--dry-run"])
    loan.check("accept-quick", 150, [*cb, "accept", "--plan", "gpu-node", "--quick", "-o", "accept",
                                     "--junit", "accept.xml"])
    try:
        builds.wait(timeout=max(1.0, min(120.0, loan.left() - 150)))
    except subprocess.TimeoutExpired:
        os.killpg(builds.pid, 9)
        builds.wait()
    loan.say(f"== builds: exit {builds.returncode}")
    common = ["--osu-tar", osu_tar, "--nccl-tests-tar", nccl_tests_tar, "--build-dir", BUILD_DIR]
    loan.check("startup", 90, [python, os.path.join(HERE, "startup.py"), "--runs", "3", *common], worth=60, every=True)
    loan.check("beside-nccl-tests", 120, [python, os.path.join(HERE, "versus_osu.py"), "--gpu-only", "--rounds", "2",
                                          "--gpu-sweep", "1K,1G,4", "--keep", os.path.join(out, "beside"), *common],
               worth=60, every=True)
    # NCCL's WARN in the error line, and nothing left in a temporary folder of its own on the failing path.
    loan.check("nccl-warn", 60, ["sh", "-c", "export TMPDIR=$(mktemp -d); "
                                             f"{COMMBENCH} allreduce --device cuda --np 2 --impl nccl --sizes 1K "
                                             "--timeout 20 -o warn.json; echo exit $?; "
                                             "ls -A $TMPDIR | sed 's/^/left: /'"],
               env={**SHARED, "NCCL_SOCKET_IFNAME": "nosuchif0"})
    # The binding: the header's rank lines beside NCCL's own affinity line and Open MPI's report.
    loan.check("binding", 60, [*cb, "allreduce", "--device", "cuda", "--np", "2", "--impl", "nccl", "--sizes", "1K",
                               "--iters", "5", "-o", "binding.json"],
               env={**SHARED, "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT", "OMPI_MCA_hwloc_base_report_bindings": "1"})
    for timing in ("per-iteration", "loop"):
        loan.check(f"spread-{timing}", 60, [*cb, "allreduce", "--device", "cuda", "--np", "3", "--impl", "nccl",
                                            "--sizes", "8,1K,64K", "--timing", timing, "--iters", "200",
                                            "-o", f"spread-{timing}.json"], env=SHARED)
    loan.check("scale-shared", 90, [*cb, "scale", "--device", "cuda", "--np", "3", "--ranks", "1,2,3", "--sizes",
                                    "1K,1M", "--budget-ms", "20", "-o", "scale.json"], env=SHARED)
    loan.check("allreduce-as-typed", 60, [*cb, "allreduce", "--sizes", "1K-1G", "-o", "as-typed.json"],
               env={"COMMBENCH_TRACE_START": "1"})
    loan.check("copy", 90, [*cb, "copy", "--sizes", "4K-1G:x16", "-o", "copy.json"])
    loan.check("p2p-bidi", 60, [*cb, "p2p", "--device", "cuda", "--sizes", "4-256M:x16", "-o", "p2p.json"])
    loan.check("gpu-tests", 300, [python, "-m", "pytest", "-q", "-n", "8", "-m", "gpu", os.path.join(ROOT, "tests", "test_gpu.py")],
               worth=10)
    loan.say(f"== all checks: {time.monotonic() - loan.start:.0f} s")
    loan.summary.close()
    shutil.rmtree(os.path.join(out, "beside", "__pycache__"), ignore_errors=True)
    with tarfile.open(out + ".tar.gz", "w:gz") as t:
        t.add(out, arcname=os.path.basename(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
