"""How long `make bench` takes (commbench allreduce --sizes 1K-1G, two ranks, every default impl) and
where the time goes: the timed iterations (the samples in the result file) and everything else
(start-up, exact checks, warm-ups, buffers, result file, fit).

    .venv/bin/python benchmarks/sweep_time.py [--sizes 1K-1G] [--target-s 60]

Runs the command as `make bench` does and exits 1 when it takes longer than the target.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

BIN = os.path.dirname(sys.executable)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1K-1G")
    ap.add_argument("--target-s", type=float, default=60.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.json")
        start = time.monotonic()
        r = subprocess.run([os.path.join(BIN, "commbench"), "allreduce", "--sizes", args.sizes, "-o", out],
                           capture_output=True, text=True)
        wall = time.monotonic() - start
        if r.returncode != 0:
            sys.exit(f"commbench failed ({r.returncode}):\n{r.stderr}")
        with open(out) as f:
            doc = json.load(f)
    timed: dict = {}
    for rec in doc["results"]:
        timed[rec["impl"]] = timed.get(rec["impl"], 0.0) + sum(rec["samples_us"]) * 1e-6
    total_timed = sum(timed.values())
    m = doc["machine"]
    print(f"commbench allreduce --sizes {args.sizes}: {len(timed)} impls, {m['ranks']} ranks, {m['cores']} cores "
          f"({m['cpu_model']}): {wall:.1f} s (target {args.target_s:g} s)")
    print(f"  timed iterations: {total_timed:.1f} s (" + ", ".join(f"{k} {v:.1f}" for k, v in timed.items()) + ")")
    print(f"  everything else:  {wall - total_timed:.1f} s (start-up, exact checks, warm-ups, buffers, result file, fit)")
    print(f"  policy: {doc['config']['policy']['rule']}")
    sys.exit(0 if wall <= args.target_s else 1)


if __name__ == "__main__":
    main()
