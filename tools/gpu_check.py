"""`make gpu-check`: on a machine with one or more GPUs, run the GPU tests and a short sweep of every
GPU command, and write a summary (gpu-check/summary.md and summary.json, with each command's output
beside it). Runs as is on a single GPU (nccl, ring and tree then have one rank) and on a multi-GPU node.
Exit status 0 when every step passed."""

import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
OUT = os.path.join(ROOT, "gpu-check")


def steps(gpus: int) -> list[tuple[str, list[str]]]:
    cb = os.path.join(BIN, "commbench")
    res = lambda name: ["-o", os.path.join(OUT, f"{name}.json")]  # noqa: E731
    out = [
        ("version", [cb, "version", "-v"]),
        ("topo", [cb, "topo", "--json"]),  # the real NVML path
        ("doctor", [cb, "doctor"]),  # exits 1 when this node fails a preflight check
        ("gpu tests", [sys.executable, "-m", "pytest", "-q", "-m", "gpu", os.path.join(ROOT, "tests")]),
        ("allreduce nccl/ring/tree", [cb, "allreduce", "--device", "cuda", "--sizes", "1K-256M:x8", *res("allreduce")]),
        ("allreduce graph", [cb, "allreduce", "--device", "cuda", "--impl", "nccl", "--graph", "--sizes", "8-64K:x8",
                             *res("allreduce_graph")]),
        ("allreduce bf16 max in-place", [cb, "allreduce", "--device", "cuda", "--dtype", "bfloat16", "--op", "max",
                                         "--in-place", "--sizes", "1K-16M:x16", *res("allreduce_bf16")]),
        ("p2p matrix", [cb, "p2p", "--device", "cuda", "--sizes", "4-64M:x16", *res("p2p_matrix")]),
        ("copy", [cb, "copy", "--sizes", "4K-256M:x8", *res("copy")]),
    ]
    if gpus >= 2:
        out.append(("p2p nccl", [cb, "p2p", "--impl", "nccl", "--np", "2", "--sizes", "4-64M:x16", *res("p2p_nccl")]))
    return out


def main() -> int:
    from commbench.gpu import visible_gpus
    gpus, why = visible_gpus()
    if gpus == 0:
        print(f"gpu-check: {why}", file=sys.stderr)
        return 2
    os.makedirs(OUT, exist_ok=True)
    summary = []
    for name, argv in steps(gpus):
        t0 = time.time()
        r = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
        log = os.path.join(OUT, name.replace(" ", "_").replace("/", "-") + ".log")
        with open(log, "w") as f:
            f.write(f"$ {' '.join(argv)}\n{r.stdout}\n{r.stderr}")
        summary.append({"step": name, "rc": r.returncode, "seconds": round(time.time() - t0, 1), "log": log})
        print(f"{'PASS' if r.returncode == 0 else 'FAIL'}  {name}  ({summary[-1]['seconds']} s)  {log}")
    with open(os.path.join(OUT, "summary.json"), "w") as f:
        json.dump({"gpus": gpus, "steps": summary}, f, indent=1)
    with open(os.path.join(OUT, "summary.md"), "w") as f:
        f.write(f"# gpu-check: {gpus} GPU(s)\n\n| step | result | seconds |\n|---|---|---|\n")
        for s in summary:
            f.write(f"| {s['step']} | {'PASS' if s['rc'] == 0 else 'FAIL (rc ' + str(s['rc']) + ')'} | {s['seconds']} |\n")
    return 0 if all(s["rc"] == 0 for s in summary) else 1


if __name__ == "__main__":
    sys.exit(main())
