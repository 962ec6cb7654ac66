"""`make gpu-check`: on a machine with one or more GPUs, run the GPU tests and a short sweep of every
GPU command, each step under a time limit, and write a summary (summary.md and summary.json, with
each step's log beside them) into a folder of its own, gpu-check/<UTC stamp>-<pid>/; gpu-check/latest
points at the newest. Runs as is on a single GPU (nccl, ring and tree then have one rank) and on a
multi-GPU node, also from a shell inside a job (`srun --pty bash`): the steps get the environment
without its launcher variables, so each starts its own ranks. doctor's verdict is reported, not
counted: a node state it flags is worth reading but is no failure of the GPU path.
`--quick` takes small sizes and leaves the GPU tests out: the pass `make test` runs on emulated GPUs
(COMMBENCH_GPU_EMULATION), which proves the steps run, not what they measure; `--base DIR` puts the
run folders under DIR instead of gpu-check/.
Exit status 0 when every counted step passed."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import itertools
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Optional

from commbench.collectives import names
from commbench.launch.world import launcher_free_env
from commbench.node import doctor
from commbench.node.gpu import SHARED_GPU, visible_gpus

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
BASE = os.path.join(ROOT, "gpu-check")
DOCTOR_JSON = "doctor.json"

# Time limits per step: several times what a healthy node needs, so that only a hang reaches them.
QUICK_S = 120  # version, topo, doctor
TESTS_S = 600  # the GPU tests
SWEEP_S = 300  # one command's short sweep
# After SIGTERM, how long a stopped step (mpirun passing it on to its ranks) may take to exit.
STOP_GRACE_S = 10

PASS, FAIL, TIMEOUT = "PASS", "FAIL", "TIMEOUT"


@dataclass(frozen=True)
class Step:
    name: str
    argv: list
    timeout_s: float
    counted: bool = True  # False: the exit status is reported, not counted (doctor's verdict on the node)
    stdout_file: Optional[str] = None  # stdout goes there instead of the log: a document to read back
    env: Optional[dict] = None  # variables set for this step alone

    @property
    def slug(self) -> str:
        return _slug(self.name)


def _slug(name: str) -> str:
    """A step's name as a file name: 'allreduce nccl/ring/tree' -> 'allreduce_nccl_ring_tree'."""
    return re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_")


# --quick: each sweep's sizes cut to these, the smallest and one beyond the emulated NCCL's 256 KiB ring.
QUICK_SIZES = "1K,512K"


def steps(gpus: int, folder: str, quick: bool = False) -> list[Step]:
    """The steps of one run on a node with `gpus` GPUs, every file they write inside `folder`; with
    `quick`, small sizes and no GPU tests."""
    cb = os.path.join(BIN, "commbench")

    def sweep(name, argv, sizes=None, quick_sizes=QUICK_SIZES, env=None):
        if sizes:
            argv = [*argv, "--sizes", quick_sizes if quick else sizes]
        if quick:
            argv = [*argv, "--budget-ms", "5"]
        return Step(name, [cb, *argv, "-o", os.path.join(folder, f"{_slug(name)}.json")], SWEEP_S, env=env)
    out = [
        Step("version", [cb, "version", "-v"], QUICK_S),
        Step("topo", [cb, "topo", "--json"], QUICK_S, stdout_file="topo.json"),  # the real NVML path
        Step("doctor", [cb, "doctor", "--json"], QUICK_S, counted=False, stdout_file=DOCTOR_JSON),
        *([] if quick else [Step("gpu tests", [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
                                                f"--basetemp={os.path.join(folder, 'pytest')}",
                                                os.path.join(ROOT, "tests")], TESTS_S)]),
        sweep("allreduce nccl/ring/tree", ["allreduce", "--device", "cuda"], "1K-256M:x8"),
        sweep("allreduce graph", ["allreduce", "--device", "cuda", "--impl", "nccl", "--graph"], "8-64K:x8"),
        sweep("allreduce bf16 max in-place", ["allreduce", "--device", "cuda", "--dtype", "bfloat16", "--op", "max",
                                              "--place", "in"], "1K-16M:x16"),
        *(sweep(name, [name, "--device", "cuda"], "1K-64M:x8") for name in names() if name != "allreduce"),
        sweep("p2p matrix", ["p2p", "--device", "cuda"], "4-64M:x16", "64K"),
        sweep("copy", ["copy"], "4K-256M:x8"),
    ]
    if gpus >= 2:
        out.append(sweep("p2p nccl", ["p2p", "--impl", "nccl", "--np", "2"], "4-64M:x16"))
        # Emulated links' figures are the host's noise: --quick flags none of them, and takes at most 3
        # ranks (every pair of 8 ranks on a test machine's 2 cores takes a minute).
        out.append(sweep("links nccl", ["links", "--impl", "nccl", "--np", str(min(gpus, 3) if quick else gpus),
                                        *(["--bandwidth-size", "64K", "--threshold-pct", "1"] if quick else
                                          ["--bandwidth-size", "64M"])]))
        out.append(sweep("allreduce delay", ["allreduce", "--device", "cuda", "--impl", "nccl,ring", "--delay", "1:2000"],
                         "1K-1M:x32"))
    if gpus == 1:
        # One GPU, several ranks: the multi-rank NCCL path (NCCL's calls, commbench's algorithms over
        # NCCL, links) checked for correctness, each rank its own NCCL host (COMMBENCH_SHARED_GPU).
        shared = {SHARED_GPU: "1"}
        for n in (2, 3):
            out.append(sweep(f"shared GPU {n} ranks allreduce", ["allreduce", "--device", "cuda", "--np", str(n)],
                             "1K-16M:x16", env=shared))
            out.append(sweep(f"shared GPU {n} ranks alltoall", ["alltoall", "--device", "cuda", "--np", str(n)],
                             "1K-16M:x16", env=shared))
        out.append(sweep("shared GPU 3 ranks links nccl", ["links", "--impl", "nccl", "--np", "3",
                                                          "--bandwidth-size", "64K" if quick else "16M"], env=shared))
    return out


def run_folder(base: str = BASE) -> str:
    """A new, empty folder for one run: <UTC stamp>-<pid>, with a counter when this process makes
    more than one within a second. Created here (never reused), so no run finds another's files."""
    os.makedirs(base, exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    for n in itertools.count():
        folder = os.path.join(base, f"{stamp}-{os.getpid()}" + (f"-{n}" if n else ""))
        try:
            os.mkdir(folder)
            return folder
        except FileExistsError:
            continue


def point_latest(base: str, folder: str) -> None:
    """base/latest -> folder, replaced in one step."""
    tmp = os.path.join(base, f".latest-{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        os.remove(tmp)
    os.symlink(os.path.basename(folder), tmp)
    os.replace(tmp, os.path.join(base, "latest"))


def run_steps(todo: list[Step], folder: str, env: Optional[dict] = None) -> list[dict]:
    """Runs the steps one after another, a failed or stopped one included, in an environment
    without launcher variables; prints a line per step."""
    env = launcher_free_env(env)
    results = []
    for step in todo:
        r = run_step(step, folder, env)
        print(f"{result_text(r):<24} {r['step']}  ({r['seconds']} s)  {r['log']}", flush=True)
        results.append(r)
    return results


def run_step(step: Step, folder: str, env: dict) -> dict:
    """One step, in its own session so that at its time limit the whole of it (mpirun and its ranks)
    can be stopped; stdout and stderr go to its log as they come, so a stopped step keeps its output."""
    log = os.path.join(folder, f"{step.slug}.log")
    t0 = time.monotonic()
    with contextlib.ExitStack() as files:
        log_file = files.enter_context(open(log, "w"))
        log_file.write(f"$ {''.join(f'{k}={v} ' for k, v in (step.env or {}).items())}{shlex.join(step.argv)}\n")
        log_file.flush()
        stdout = log_file
        if step.stdout_file:
            stdout = files.enter_context(open(os.path.join(folder, step.stdout_file), "w"))
        try:
            proc = subprocess.Popen(step.argv, stdout=stdout, stderr=log_file, cwd=ROOT, env={**env, **(step.env or {})},
                                    start_new_session=True)
        except OSError as e:  # the program is missing: this step fails, the others still run
            rc: Optional[int] = 127
            log_file.write(f"gpu-check: cannot start it: {e}\n")
        else:
            rc = _wait(proc, step.timeout_s)
            if rc is None:
                log_file.write(f"\ngpu-check: stopped at the time limit of {step.timeout_s:g} s\n")
    status = TIMEOUT if rc is None else PASS if rc == 0 else FAIL
    return {"step": step.name, "argv": step.argv, "status": status, "rc": rc, "counted": step.counted,
            "seconds": round(time.monotonic() - t0, 1), "timeout_s": step.timeout_s, "log": log}


def _wait(proc: subprocess.Popen, timeout_s: float) -> Optional[int]:
    """The step's exit status, or None when it was stopped at its time limit."""
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _stop(proc)
        return None
    except BaseException:  # Ctrl-C reaches gpu-check alone (the step has a session of its own)
        _stop(proc)
        raise


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the step's process group (mpirun passes it on to its ranks), then SIGKILL to what
    is left of it."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=STOP_GRACE_S)


def passed(results: list[dict]) -> bool:
    return all(r["status"] == PASS for r in results if r["counted"])


def result_text(r: dict) -> str:
    text = {PASS: PASS, FAIL: f"FAIL (rc {r['rc']})", TIMEOUT: f"TIMEOUT ({r['timeout_s']:g} s)"}[r["status"]]
    return text if r["counted"] else f"{text}, not counted"


def doctor_summary(doc: Optional[dict]) -> dict:
    """doctor's verdict line and its FAIL and WARN checks, from its --json document (None when
    doctor left none)."""
    if not doc:
        return {"status": None, "line": "doctor: no verdict (see doctor.log)", "findings": []}
    checks = doc["checks"]
    return {"status": doc["status"], "line": doctor.verdict_line([c["status"] for c in checks]),
            "findings": [c for c in checks if c["status"] in (doctor.FAIL, doctor.WARN)]}


def read_doctor(path: str) -> Optional[dict]:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def write_summary(folder: str, gpus: int, results: list[dict], node: dict) -> None:
    """summary.json and summary.md: every step's result and time limit, and doctor's verdict on the
    node (`node`, from doctor_summary)."""
    with open(os.path.join(folder, "summary.json"), "w") as f:
        json.dump({"gpus": gpus, "folder": folder, "passed": passed(results), "steps": results, "doctor": node},
                  f, indent=1)
    lines = [f"# gpu-check: {gpus} GPU(s), {'PASS' if passed(results) else 'FAIL'}", "",
             "| step | result | seconds | limit (s) |", "|---|---|---|---|"]
    lines += [f"| {r['step']} | {result_text(r)} | {r['seconds']} | {r['timeout_s']:g} |" for r in results]
    lines += ["", "## doctor", "", node["line"], ""]
    lines += [f"- {c['status']} {c['name']}: {c['evidence']}" + (f" (remedy: {c['remedy']})" if c["remedy"] else "")
              for c in node["findings"]]
    with open(os.path.join(folder, "summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu_check", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, no GPU tests (emulated GPUs)")
    parser.add_argument("--base", default=BASE, help="folder of the run folders (default: gpu-check/)")
    args = parser.parse_args(argv)
    gpus, why = visible_gpus()
    if gpus == 0:
        print(f"gpu-check: {why}", file=sys.stderr)
        return 2
    folder = run_folder(args.base)
    point_latest(args.base, folder)
    print(f"gpu-check: {gpus} GPU(s), results in {folder}", flush=True)
    results = run_steps(steps(gpus, folder, args.quick), folder)
    node = doctor_summary(read_doctor(os.path.join(folder, DOCTOR_JSON)))
    print(node["line"])
    write_summary(folder, gpus, results, node)
    print(f"gpu-check: {'PASS' if passed(results) else 'FAIL'}; summary in {os.path.join(folder, 'summary.md')}")
    return 0 if passed(results) else 1


if __name__ == "__main__":
    sys.exit(main())
