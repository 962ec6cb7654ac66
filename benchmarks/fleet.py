"""`commbench fleet` over a thousand nodes' result files, timed as a user runs it, against its target
of 10 s on the 2-core development machine: the files synthesized as tests/test_fleet.py does (three
nodes planted, each worse in a metric of its own), the command run --repeat times, the wall seconds
of each printed beside the target, and whether the nodes named are exactly the planted three.

    .venv/bin/python benchmarks/fleet.py [--nodes 1000] [--repeat 3]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

from docs import PLANTED, write_fleet  # noqa: E402  (tests/docs.py: the fleet the tests judge)

TARGET_S = 10.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    commbench = os.path.join(os.path.dirname(sys.executable), "commbench")
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        write_fleet(tmp, args.nodes)
        print(f"# {args.nodes} node files written in {time.perf_counter() - t0:.1f} s; target {TARGET_S:g} s per fleet run")
        print(f"{'run':>3}  {'seconds':>8}  {'/ target':>8}  named")
        planted = {(f"node{i:04d}", metric) for i, (_, metric) in PLANTED.items() if i < args.nodes}
        for i in range(1, args.repeat + 1):
            start = time.perf_counter()
            r = subprocess.run([commbench, "fleet", tmp, "--json"], capture_output=True, text=True)
            seconds = time.perf_counter() - start
            named = {(o["node"], o["metric"]) for o in json.loads(r.stdout)["outliers"]} if r.stdout else set()
            print(f"{i:>3}  {seconds:>8.2f}  {seconds / TARGET_S:>8.2f}  "
                  f"{'exactly the planted' if named == planted else f'{len(named)} node-metric(s), not the planted'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
