"""commbench's measurement overhead against a C program that times like the OSU benchmarks, and the
bandwidth of our ring and tree beside MPI_Allreduce. Prints measured figures side by side.

    .venv/bin/python benchmarks/overhead.py [--iters 20000] [--repeats 3]

The ratio commbench / C compares medians of per-iteration times at 4 B (all-reduce) and at 8 B,
256 KiB and 1 MiB (ping-pong, separate page-aligned send and receive buffers on both sides, as
osu_latency), and of loops of back-to-back 4 B all-reduces (--timing loop; the median of 5 loops,
each averaged over the ranks); the target is <= 1.10 for each. Repeats interleave the two programs and keep each one's best
median, so that drift in the machine's load does not favour either.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

from commbench.sizes import format_size

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.dirname(sys.executable)


def env():
    e = dict(os.environ)
    if os.geteuid() == 0:
        e["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        e["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    return e


def mpirun(args):
    r = subprocess.run([os.path.join(BIN, "mpirun"), "--np", "2", *args], capture_output=True, text=True, env=env())
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(args)}\n{r.stderr}")
    return r.stdout


def build_reference():
    out = os.path.join(HERE, "build", "osu_like")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    subprocess.run([os.path.join(BIN, "mpicc"), "-O2", "-o", out, os.path.join(HERE, "osu_like.c")], check=True)
    return out


PINGPONG_BYTES = (8, 256 << 10, 1 << 20)


def reference(exe, test, iters, *extra):
    fields = mpirun([exe, test, str(iters), "200", *map(str, extra)]).split()
    return float(fields[3]), float(fields[5])  # median, mean


def commbench_json(args, tmp):
    path = os.path.join(tmp, f"r{len(os.listdir(tmp))}.json")
    mpirun([os.path.join(BIN, "commbench"), *args, "--warmup", "200", "-o", path])
    with open(path) as f:
        return json.load(f)["results"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=5)
    opts = ap.parse_args()
    exe = build_reference()
    tests = [("allreduce 4 B (mpi)", "c_ar", "cb_ar"), ("allreduce 4 B, loop", "c_arl", "cb_arl")] + \
        [(f"ping-pong {format_size(n)}B", f"c_pp{n}", f"cb_pp{n}") for n in PINGPONG_BYTES]
    best = {key: [] for _, c, cb in tests for key in (c, cb)}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(opts.repeats):
            best["c_ar"].append(reference(exe, "allreduce", opts.iters))
            best["cb_ar"].append(commbench_json(["allreduce", "--impl", "mpi", "--sizes", "4", "--iters",
                                                 str(opts.iters)], tmp)[0]["time_us"])
            # Loop timing: 5 loops of --iters calls each on both sides.
            best["c_arl"].append(reference(exe, "allreduce_loop", opts.iters))
            best["cb_arl"].append(commbench_json(["allreduce", "--impl", "mpi", "--sizes", "4", "--timing", "loop",
                                                  "--loops", "5", "--iters", str(opts.iters)], tmp)[0]["time_us"])
            for n in PINGPONG_BYTES:
                # Large messages take longer: fewer iterations keep each run short.
                iters = opts.iters if n < 1024 else max(opts.iters // 20, 100)
                best[f"c_pp{n}"].append(reference(exe, "pingpong", iters, n))
                pp = commbench_json(["p2p", "--sizes", str(n), "--iters", str(iters)], tmp)
                best[f"cb_pp{n}"].append(next(r for r in pp if r["op"] == "pingpong")["time_us"])
        print(f"# overhead, 2 ranks, {opts.iters} iterations (ping-pong of 256 KiB and more: "
              f"{max(opts.iters // 20, 100)}), best of {opts.repeats} runs (us)")
        print(f"{'test':<22}{'C median':>10}{'C mean':>10}{'commbench':>11}{'ratio':>8}")
        for name, c, cb in tests:
            c_med = min(m for m, _ in best[c])
            c_mean = min(m for _, m in best[c])
            cb_med = min(t["median"] for t in best[cb])
            print(f"{name:<22}{c_med:>10.3f}{c_mean:>10.3f}{cb_med:>11.3f}{cb_med / c_med:>8.2f}")

        rows = commbench_json(["allreduce", "--impl", "ring,tree,mpi", "--sizes", "1M-256M:x4"], tmp)
        print("\n# all-reduce busbw (GB/s), 2 ranks, float32")
        impls = list(dict.fromkeys(r["impl"] for r in rows))
        print(f"{'size':>10}" + "".join(f"{i:>9}" for i in impls))
        for size in sorted({r["size_bytes"] for r in rows}):
            cells = {r["impl"]: r["busbw_gbps"] for r in rows if r["size_bytes"] == size}
            print(f"{size >> 20:>9}M" + "".join(f"{cells[i]:>9.2f}" for i in impls))


if __name__ == "__main__":
    main()
