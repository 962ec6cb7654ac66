"""commbench beside the OSU Micro-Benchmarks 7.4 on the same MPI, launcher and binding: the ratio of
commbench's figure to OSU's per benchmark and size, the median of several rounds; where GPUs are
visible, beside nccl-tests 2.19 too (beside_nccl_tests.py).

    .venv/bin/python benchmarks/versus_osu.py [--rounds 3] [--sizes 1K,64K,1M,16M] [--np 2]
        [--osu-tar ../shared/reference/osu-micro-benchmarks-7.4.tar.gz] [--build-dir DIR]
        [--nccl-tests-tar ../shared/reference/nccl-tests-2.19.6.tar.gz] [--gpu-sweep 1K,1G,32]
        [--gpu-ranks N] [--build-only] [--gpu-only] [--keep DIR]

OSU is built from its source tarball with this venv's mpicc, in a folder outside the repository
(default ~/.cache/commbench-bench). Each round runs every OSU benchmark and then commbench's
counterpart, so that drift in the machine's load reaches both.

Conventions set side by side (docs/commands/collectives.md, "Timing: per-iteration and loop"):
- OSU's collectives time each call alone between barriers, and print each rank's own mean time
  averaged over the ranks. commbench's per-iteration figure is the slowest rank's median (`slowest`);
  `ranks` is the mean of the ranks' own medians (the records' per_rank), OSU's aggregation over the
  ranks; `average` the slowest rank's mean over iterations, OSU's statistic over them (a noisy
  machine's outliers raise a mean, not a median); `loop` is --timing loop (nccl-tests' convention:
  back-to-back calls, averaged over the ranks). The p2p rows are the median and (`average`) the mean
  of per-iteration samples, and `loop` (--timing loop: back-to-back messages, as OSU times them).
- Placement: broadcast in place (MPI_Bcast's one buffer), the others out of place, as OSU calls them.
- Sizes: osu_allgather's and osu_alltoall's are per rank (per peer for all-to-all), commbench's the
  whole receive buffer, so commbench runs at size x np; the others are the same bytes.
- osu_latency is half a round trip, as commbench's ping-pong; osu_bw's MB/s (1e6 B/s) becomes a time
  per message, beside commbench's windowed bandwidth (window 64 in both).
Ratios are commbench / OSU of times: above 1, commbench reads slower.
- OSU's non-blocking collectives (osu_iallreduce, osu_iallgather, osu_ialltoall) beside `commbench
  overlap`: both start the call, compute for as long as the call alone took, then wait; without tests
  in between (OSU's -t 0, commbench's --probes 0), and with 8 spread through the computation; their
  overlap percentages side by side and the difference in points (docs/method.md, "Overlap").
"""

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile

from beside_nccl_tests import BIN  # where mpirun, mpicc and commbench are (this script's folder is on the path)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OSU = "osu-micro-benchmarks-7.4"

# OSU benchmark -> (commbench command, whether OSU's size is per rank, OSU's extra options,
# commbench's extra options). MPI_Bcast has one buffer: out of place, commbench's broadcast also
# copies the root's input into its output inside the timed call (as NCCL's out-of-place broadcast
# does), which OSU's does not; in place it is MPI_Bcast alone.
COLLECTIVES = {
    "osu_allreduce": ("allreduce", False, ["-T", "mpi_float"], []),
    "osu_allgather": ("allgather", True, [], []),
    "osu_reduce_scatter_block": ("reducescatter", False, ["-T", "mpi_float"], []),
    "osu_bcast": ("broadcast", False, [], ["--place", "in"]),
    "osu_reduce": ("reduce", False, ["-T", "mpi_float"], []),
    "osu_alltoall": ("alltoall", True, [], []),
}

# OSU's non-blocking collective -> (commbench's collective, whether OSU's size is per rank, OSU's
# extra options): `commbench overlap` of the same call; each with these many tests during the
# computation (OSU's -t, commbench's --probes).
NONBLOCKING = {
    "osu_iallreduce": ("allreduce", False, ["-T", "mpi_float"]),
    "osu_iallgather": ("allgather", True, []),
    "osu_ialltoall": ("alltoall", True, []),
}
PROBES = (0, 8)


def env() -> dict:
    e = dict(os.environ)
    if os.geteuid() == 0:
        e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return e


def run(argv: list, cwd=None, environ=None) -> str:
    r = subprocess.run(argv, capture_output=True, text=True, env=environ or env(), cwd=cwd)
    if r.returncode != 0:
        sys.exit(f"versus_osu: {' '.join(argv)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return r.stdout


def build_osu(tar: str, build_dir: str) -> str:
    """OSU's source tree, configured and built with this venv's MPI compilers (once)."""
    src = os.path.join(build_dir, OSU)
    done = os.path.join(src, "c", "mpi", "collective", "blocking", "osu_alltoall")
    if os.path.exists(done):
        return src
    if os.path.realpath(build_dir).startswith(os.path.realpath(ROOT) + os.sep):
        sys.exit("versus_osu: --build-dir must lie outside the repository")
    if not os.path.isfile(tar):
        sys.exit(f"versus_osu: no OSU source at {tar}: give its tarball with --osu-tar")
    os.makedirs(build_dir, exist_ok=True)
    with tarfile.open(tar) as t:
        t.extractall(build_dir, filter="data")
    print(f"building OSU 7.4 in {src} ...", flush=True)
    run(["./configure", f"CC={os.path.join(BIN, 'mpicc')}", f"CXX={os.path.join(BIN, 'mpicxx')}"], cwd=src)
    run(["make", f"-j{os.cpu_count() or 1}"], cwd=src)
    return src


def osu_exe(src: str, name: str) -> str:
    folder = ("pt2pt", "standard") if name in ("osu_latency", "osu_bw") else \
        ("collective", "non_blocking") if name in NONBLOCKING else ("collective", "blocking")
    return os.path.join(src, "c", "mpi", *folder, name)


def osu_figures(src: str, name: str, sizes: list, np_: int, extra: list, column: int = 1) -> dict:
    """{size: time per call or per message (us)} from one OSU run over the sizes' range; `column`: the
    figure's column (-1: a non-blocking benchmark's overlap, its last)."""
    lo, hi = min(sizes), max(sizes)
    out = run([os.path.join(BIN, "mpirun"), "--np", str(np_ if name not in ("osu_latency", "osu_bw") else 2),
               osu_exe(src, name), "-m", f"{lo}:{hi}", *extra])
    got = {}
    for line in out.splitlines():
        cells = line.split()
        if not cells or not cells[0].isdigit():
            continue
        size, value = int(cells[0]), float(cells[column])
        if size in sizes:
            # osu_bw prints MB/s: the time per message is size / rate.
            got[size] = size / value if name == "osu_bw" else value
    return got


def commbench_runs(args: list, tmp: str, tag: str) -> dict:
    out = os.path.join(tmp, f"{tag}.json")
    if os.path.exists(out):
        os.remove(out)
    run([os.path.join(BIN, "commbench"), *args, "--no-fit", "-o", out] if args[0] != "p2p" else
        [os.path.join(BIN, "commbench"), *args, "-o", out])
    with open(out) as f:
        return json.load(f)


def collective_figures(cmd: str, sizes: list, np_: int, tmp: str, extra: list) -> dict:
    """{(convention, size): us} for commbench's MPI call: slowest, ranks (the mean of the ranks' own
    medians), average (the slowest rank's mean), loop."""
    got = {}
    sweep = ",".join(str(s) for s in sizes)
    base = [cmd, "--impl", "mpi", "--device", "cpu", "--np", str(np_), "--sizes", sweep, "--dtype", "float32", *extra]
    for rec in commbench_runs(base, tmp, f"{cmd}-step")["results"]:
        got[("slowest", rec["size_bytes"])] = rec["time_us"]["median"]
        got[("ranks", rec["size_bytes"])] = statistics.mean(r["median_us"] for r in rec["per_rank"])
        got[("average", rec["size_bytes"])] = rec["time_us"]["mean"]
    for rec in commbench_runs([*base, "--timing", "loop"], tmp, f"{cmd}-loop")["results"]:
        got[("loop", rec["size_bytes"])] = rec["time_us"]["median"]
    return got


def p2p_figures(sizes: list, tmp: str) -> dict:
    got = {}
    doc = commbench_runs(["p2p", "--impl", "mpi", "--sizes", ",".join(str(s) for s in sizes)], tmp, "p2p")
    for rec in doc["results"]:
        got[(rec["op"], "median", rec["size_bytes"])] = rec["time_us"]["median"]
        got[(rec["op"], "average", rec["size_bytes"])] = rec["time_us"]["mean"]
    # OSU's p2p tests time one loop of back-to-back messages (windows, for osu_bw): --timing loop.
    doc = commbench_runs(["p2p", "--impl", "mpi", "--timing", "loop", "--sizes", ",".join(str(s) for s in sizes)],
                         tmp, "p2p-loop")
    for rec in doc["results"]:
        got[(rec["op"], "loop", rec["size_bytes"])] = rec["time_us"]["median"]
    return got


def overlap_figures(cmd: str, sizes: list, np_: int, tmp: str, probes: int) -> dict:
    """{size: overlap %} of `commbench overlap` of the MPI library's non-blocking call."""
    doc = commbench_runs(["overlap", cmd, "--impl", "mpi", "--device", "cpu", "--np", str(np_), "--sizes",
                          ",".join(str(s) for s in sizes), "--dtype", "float32", "--probes", str(probes)], tmp,
                         f"overlap-{cmd}-{probes}")
    return {rec["size_bytes"]: rec["overlap_pct"] for rec in doc["results"]}


def overlap_half(args, src: str, sizes: list, tmp: str) -> list[str]:
    """OSU's and commbench's overlap percentages, each the median of the rounds, and commbench's minus
    OSU's in points: the table's lines."""
    from commbench.sizes import format_size
    got: dict = {}
    for _ in range(args.rounds):
        for name, (cmd, per_rank, osu_extra) in NONBLOCKING.items():
            for probes in PROBES:
                osu = osu_figures(src, name, sizes, args.np_, [*osu_extra, "-t", str(probes)], column=-1)
                scale = args.np_ if per_rank else 1
                ours = overlap_figures(cmd, [s * scale for s in sizes], args.np_, tmp, probes)
                for s in sizes:
                    got.setdefault((name, probes, "OSU", s), []).append(osu[s])
                    got.setdefault((name, probes, "commbench", s), []).append(ours[s * scale])
    lines = [f"\noverlap (%) of OSU 7.4's non-blocking collectives and of commbench overlap, median of {args.rounds} "
             f"round(s), {args.np_} ranks, with 0 and {PROBES[-1]} tests during the computation; diff: commbench - "
             f"OSU, in points",
             f"{'benchmark':<26} {'tests':>5} {'figure':<10} " + " ".join(f"{format_size(s):>7}" for s in sizes)]
    for name in NONBLOCKING:
        for probes in PROBES:
            rows = {who: [statistics.median(got[(name, probes, who, s)]) for s in sizes] for who in ("OSU", "commbench")}
            rows["diff"] = [c - o for c, o in zip(rows["commbench"], rows["OSU"])]
            lines += [f"{name:<26} {probes:>5} {who:<10} " + " ".join(f"{v:7.1f}" for v in values)
                      for who, values in rows.items()]
    return lines


def osu_half(args, sizes: list, tmp: str) -> list[str]:
    """commbench / OSU: the table's lines."""
    from commbench.sizes import format_size
    src = build_osu(args.osu_tar, args.build_dir)
    ratios: dict = {}
    for rnd in range(args.rounds):
        print(f"round {rnd + 1} of {args.rounds}", flush=True)
        osu = {name: osu_figures(src, name, sizes, args.np_, []) for name in ("osu_latency", "osu_bw")}
        ours = p2p_figures(sizes, tmp)
        for name, op in (("osu_latency", "pingpong"), ("osu_bw", "bandwidth")):
            for s in sizes:
                for stat in ("median", "average", "loop"):
                    ratios.setdefault((name, stat, s), []).append(ours[(op, stat, s)] / osu[name][s])
        for name, (cmd, per_rank, osu_extra, our_extra) in COLLECTIVES.items():
            figures = osu_figures(src, name, sizes, args.np_, osu_extra)
            scale = args.np_ if per_rank else 1
            ours = collective_figures(cmd, [s * scale for s in sizes], args.np_, tmp, our_extra)
            for s in sizes:
                for conv in ("slowest", "ranks", "average", "loop"):
                    ratios.setdefault((name, conv, s), []).append(ours[(conv, s * scale)] / figures[s])
    lines = [f"\ncommbench / OSU 7.4, times, median of {args.rounds} round(s), {args.np_} ranks, same mpirun "
             f"({os.path.join(BIN, 'mpirun')})",
             f"{'benchmark':<26} {'commbench':<10} " + " ".join(f"{format_size(s):>7}" for s in sizes)]
    for (name, conv) in dict.fromkeys((n, c) for n, c, _ in ratios):
        cells = " ".join(f"{statistics.median(ratios[(name, conv, s)]):7.2f}" for s in sizes)
        lines.append(f"{name:<26} {conv:<10} {cells}")
    return lines + overlap_half(args, src, sizes, tmp)


def main() -> None:
    import beside_nccl_tests as gpu_half
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="1K,64K,1M,16M")
    ap.add_argument("--np", type=int, default=2, dest="np_")
    ap.add_argument("--osu-tar", default=os.path.join(ROOT, "..", "shared", "reference", f"{OSU}.tar.gz"))
    ap.add_argument("--nccl-tests-tar", default=os.path.join(ROOT, "..", "shared", "reference", "nccl-tests-2.19.6.tar.gz"))
    ap.add_argument("--gpu-sweep", default="1K,1G,32", help="nccl-tests' -b, -e and -f of the GPU half")
    ap.add_argument("--gpu-ranks", type=int, default=0,
                    help="ranks of the GPU half (default one per visible GPU; more than the GPUs share them, "
                         "NCCL over sockets on loopback: a comparison of the tools on one GPU)")
    ap.add_argument("--build-dir", default=os.path.join(os.path.expanduser("~"), ".cache", "commbench-bench"))
    ap.add_argument("--build-only", action="store_true",
                    help="build OSU, and nccl-tests where a CUDA compiler is found, then stop (no GPU needed)")
    ap.add_argument("--gpu-only", action="store_true",
                    help="leave OSU out: build and run the nccl-tests half alone (a GPU machine's short lease)")
    ap.add_argument("--keep", metavar="DIR",
                    help="keep the last round's logs and result files of both tools in DIR (default: a temporary "
                         "folder, removed)")
    args = ap.parse_args()
    if args.build_only:
        if not args.gpu_only:
            build_osu(args.osu_tar, args.build_dir)
        print(f"built in {gpu_half.build(args.nccl_tests_tar, args.build_dir, run)}")
        return
    # Only now: the builds need no commbench (a machine can build while commbench installs).
    from commbench.sizes import parse_size, parse_sizes
    lines: list[str] = []
    with contextlib.nullcontext(args.keep) if args.keep else tempfile.TemporaryDirectory() as tmp:
        os.makedirs(tmp, exist_ok=True)
        if not args.gpu_only:
            lines += osu_half(args, parse_sizes(args.sizes), tmp)
        gpus = gpu_half.gpu_count()
        ranks = args.gpu_ranks or gpus
        if gpus:
            lo, hi, factor = args.gpu_sweep.split(",")
            bin_dir = gpu_half.build(args.nccl_tests_tar, args.build_dir, run)
            sweep = (parse_size(lo, "-b"), parse_size(hi, "-e"), int(factor))
            ratios = gpu_half.compare(bin_dir, sweep, ranks, gpus, args.rounds, tmp, env(), run)
            lines += gpu_half.table(ratios, ranks, gpus, args.rounds)
        else:
            lines.append("\nno GPU visible: the nccl-tests half (benchmarks/beside_nccl_tests.py) did not run")
    print("\n".join(lines))

if __name__ == "__main__":
    main()
