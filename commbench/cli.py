"""Command line: parse, choose, print. No measurement logic lives here."""

from __future__ import annotations

import functools
import math
import os
import subprocess
import sys
from typing import Optional

import click

from . import __version__
from .errors import CommbenchError
from .gpu import CUDA_EVENT_RESOLUTION_S, DEFAULT_TIMEOUT_S
from .policy import Policy
from .sizes import parse_size, parse_sizes, round_to_itemsize
from .spec import DTYPES, REDOPS, dtype_of, redop_code
from .world import detect_launcher, init_world, launch_rank, standalone_command


def _policy_options(f):
    @click.option("--warmup", type=click.IntRange(min=0), default=5, show_default=True,
                  help="Warm-up iterations per size (adaptive mode caps them at half the budget).")
    @click.option("--iters", type=click.IntRange(min=1), default=None,
                  help="Fixed number of timed iterations per size (default: from --budget-ms).")
    @click.option("--budget-ms", type=click.FloatRange(min=0, min_open=True), default=200.0, show_default=True,
                  help="Time budget for the timed iterations of one size.")
    @click.option("--min-iters", type=click.IntRange(min=1), default=5, show_default=True,
                  help="Floor on timed iterations per size.")
    @click.option("--max-iters", type=click.IntRange(min=1), default=2000, show_default=True,
                  help="Ceiling on timed iterations per size.")
    @click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
                  help="Result file (default commbench-results/<UTC stamp>_<host>_<op>.json); never overwritten.")
    @functools.wraps(f)
    def wrapper(*args, warmup, iters, budget_ms, min_iters, max_iters, **kwargs):
        if min_iters > max_iters:
            raise CommbenchError(f"--min-iters {min_iters} exceeds --max-iters {max_iters}")
        kwargs["policy"] = Policy(warmup=max(warmup, 1), iters=iters, budget_ms=budget_ms,
                                  min_iters=min_iters, max_iters=max_iters)
        return f(*args, **kwargs)
    return wrapper


def _verdict_options(f):
    @click.option("--fabric", default=None, help="Judge the fit against this catalog fabric (see 'commbench fabrics').")
    @click.option("--expect-gbps", type=click.FloatRange(min=0, min_open=True), default=None,
                  help="Expected link bandwidth (GB/s) for a fabric the catalog lacks.")
    @click.option("--expect-us", type=click.FloatRange(min=0), default=None, help="Expected per-message alpha (us).")
    @click.option("--pass-pct", type=click.FloatRange(0, 100), default=80.0, show_default=True,
                  help="PASS at or above this percent of the expected bandwidth.")
    @click.option("--fail-pct", type=click.FloatRange(0, 100), default=60.0, show_default=True,
                  help="FAIL below this percent (WARN in between).")
    @functools.wraps(f)
    def wrapper(*args, fabric, expect_gbps, expect_us, pass_pct, fail_pct, **kwargs):
        from .fabrics import catalog
        if fabric is not None and fabric not in catalog():
            raise CommbenchError(f"unknown fabric '{fabric}': choose from {', '.join(catalog())}, or give --expect-gbps")
        if fail_pct > pass_pct:
            raise CommbenchError(f"--fail-pct {fail_pct:g} exceeds --pass-pct {pass_pct:g}")
        kwargs["judge"] = {"fabric": fabric, "expect_gbps": expect_gbps, "expect_us": expect_us,
                           "pass_pct": pass_pct, "fail_pct": fail_pct}
        return f(*args, **kwargs)
    return wrapper


def _expectation(judge: dict, meta: dict):
    """The fabric to judge against: named, given as figures, or guessed from the run's topology."""
    from .fabrics import expectation, guess_fabric
    return expectation(judge["fabric"] or (None if judge["expect_gbps"] else guess_fabric(meta)),
                       judge["expect_gbps"], judge["expect_us"])


def _fit_lines(doc: dict, judge: dict) -> list[str]:
    from .fitreport import fit_lines, fits_with_verdicts
    return fit_lines(fits_with_verdicts(doc["results"], _expectation(judge, doc), judge["pass_pct"], judge["fail_pct"]))


def _finite_positive(ctx, param, value):
    if value is not None and not (math.isfinite(value) and value > 0):
        raise click.BadParameter(f"{value} is not a positive number of seconds", ctx, param)
    return value


def _timeout_option(f):
    return click.option("--timeout", "timeout_s", type=float, default=DEFAULT_TIMEOUT_S, show_default=True,
                        callback=_finite_positive,
                        help="GPU: seconds one timed call may wait for its peers; then the NCCL communicator "
                             "is aborted and the run ends with exit 1, keeping the rows measured so far.")(f)


def _ranks_option(f):
    return click.option("--np", "nranks", type=click.IntRange(min=1), default=None,
                        help="Ranks to spawn when no launcher is present (default: one per visible GPU "
                             "with --device cuda, else 2).")(f)


def _run(nranks: Optional[int], default_ranks: int, body) -> None:
    """Runs body(world) on every rank; with no launcher, first re-runs this command under the
    bundled mpirun. Exit status: 0 exact, 1 wrong elements or a failure midway, 2 bad input."""
    if detect_launcher() is None:
        from .machine import cores
        from .reporter import PROGRESS_MARK
        argv, env, notes = standalone_command(sys.argv[1:], nranks or default_ranks, cores())
        if sys.stderr.isatty():
            env[PROGRESS_MARK] = "1"
        for n in notes:
            click.echo(f"commbench: {n}", err=True)
        sys.exit(subprocess.call(argv, env=env))
    world = init_world()
    if nranks is not None and nranks != world.size:
        raise CommbenchError(f"--np {nranks} given but the launcher started {world.size} ranks; drop --np under a launcher")
    try:
        wrong = body(world)
    finally:
        world.close()
    sys.exit(1 if wrong else 0)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="commbench")
def cli() -> None:
    """Collective-communication microbenchmarks with exact checks and per-iteration statistics."""


@cli.command()
@click.option("--sizes", "-s", default="1K-1G", show_default=True,
              help="Sizes in bytes: 1K-1G (doubling), 8-256M:x4, 1M-8M:+1M, 8,1K,1M.")
@click.option("--impl", "impl_text", default=None,
              help="Comma list. CPU: mpi, ring, tree, gloo (default all; gloo under torchrun). "
                   "GPU: nccl, ring, tree, mpi (default nccl,ring,tree).")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
              help="Where the buffers live; auto = cuda when a GPU is visible.")
@click.option("--graph", is_flag=True, help="GPU: replay each iteration from a CUDA graph (small messages).")
@click.option("--dtype", "-d", default="float32", show_default=True, help=f"One of {', '.join(DTYPES)}.")
@click.option("--op", "redop", default="sum", show_default=True, help=f"Reduction: {', '.join(REDOPS)}.")
@click.option("--in-place/--out-of-place", default=False, show_default=True)
@click.option("--chunk", default="1M", show_default=True, help="Tree pipeline chunk size in bytes.")
@_policy_options
@_ranks_option
@_timeout_option
@click.option("--no-fit", is_flag=True, help="Do not print the latency/bandwidth fit after the table.")
@_verdict_options
def allreduce(sizes, impl_text, device, graph, dtype, redop, in_place, chunk, nranks, timeout_s, output, policy,
              no_fit, judge) -> None:
    """Time all-reduce implementations across message sizes."""
    from .backends import DEFAULT_IMPLS, parse_impls
    from .sweep import RunConfig, run_allreduce
    torch_dtype = dtype_of(dtype)
    redop_code(redop)
    itemsize = torch_dtype.itemsize
    size_list, notes = round_to_itemsize(parse_sizes(sizes), itemsize)
    chunk_bytes = parse_size(chunk)
    if chunk_bytes < itemsize:
        raise CommbenchError(f"--chunk {chunk} is smaller than one {dtype} element")
    device, gpus = _resolve_device(device, impl_text)
    if graph and device != "cuda":
        raise CommbenchError("--graph replays CUDA graphs: it needs --device cuda")
    default_impls = "gloo" if detect_launcher() == "torchrun" and device == "cpu" else DEFAULT_IMPLS[device]
    impls = parse_impls(impl_text or default_impls, device)
    cfg = RunConfig(op="allreduce", impls=tuple(i.name for i in impls), sizes=tuple(size_list), dtype=dtype,
                    redop=redop, in_place=in_place, device=device, graph=graph, chunk_bytes=chunk_bytes,
                    timeout_s=timeout_s, policy=policy)

    def body(world):
        for impl in impls:
            impl.prepare(world, cfg)
        reporter = _reporter(world, cfg, output, len(impls) * len(size_list), None if no_fit else judge)
        if reporter:
            for n in notes:
                reporter.note(n)
        return _sweep(reporter, lambda: run_allreduce(world, cfg, impls, reporter), world)

    _run(nranks, gpus if device == "cuda" else 2, body)


def _resolve_device(device: str, impl_text: Optional[str]) -> tuple[str, int]:
    """('cpu' or 'cuda', visible GPUs). auto picks cuda when a GPU is visible, or when the impls
    asked for only run there."""
    from .gpu import require_gpu, visible_gpus
    gpus, _ = visible_gpus()
    if device == "auto":
        wants_gpu = impl_text is not None and "nccl" in impl_text.split(",")
        device = "cuda" if gpus or wants_gpu else "cpu"
    if device == "cuda":
        gpus = require_gpu("--device cuda" if not impl_text else f"--impl {impl_text}")
    return device, gpus


@cli.command()
@click.option("--sizes", "-s", default="1-4M", show_default=True, help="Message sizes in bytes (as for allreduce).")
@click.option("--impl", type=click.Choice(["mpi", "nccl", "gloo"]), default=None,
              help="Transport between ranks: mpi (default; host buffers), nccl (GPU buffers), gloo (host buffers, "
                   "timed from Python; the default under torchrun).")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="cuda with --impl mpi: the peer-to-peer matrix of this process's GPUs (no ranks).")
@click.option("--pairs", default="0:1", show_default=True,
              help="Rank pairs: 0:1, a list 0:1,0:2, or 'all'; the lower rank sends.")
@click.option("--window", type=click.IntRange(min=1), default=64, show_default=True,
              help="Messages in flight per bandwidth iteration.")
@_policy_options
@_ranks_option
@_timeout_option
@click.option("--no-fit", is_flag=True, help="Do not print the latency/bandwidth fit after the table.")
@_verdict_options
def p2p(sizes, impl, device, pairs, window, nranks, timeout_s, output, policy, no_fit, judge) -> None:
    """Point-to-point latency and bandwidth: between rank pairs (MPI or NCCL), or between every pair
    of this process's GPUs (--device cuda)."""
    from .sweep import RunConfig, resolve_pairs, run_p2p
    size_list = parse_sizes(sizes)
    if device == "cuda" and impl in ("mpi", "gloo"):
        raise CommbenchError(f"p2p --impl {impl} moves host buffers; for GPUs use --impl nccl (between ranks) or "
                             f"--device cuda alone (this process's GPUs)")
    impl = impl or ("gloo" if detect_launcher() == "torchrun" and device == "cpu" else "mpi")
    if impl == "nccl":
        device = "cuda"
        gpus = _resolve_device("cuda", "nccl")[1]
    elif device == "cuda":
        if nranks is not None or detect_launcher() is not None:
            raise CommbenchError("p2p --device cuda measures this process's GPUs: run it once, without --np or a launcher")
        return _local_peer_matrix(size_list, output, policy)
    else:
        gpus = 0

    def body(world):
        cfg = RunConfig(op="p2p", impls=(impl,), sizes=tuple(size_list), dtype="uint8", redop="none",
                        device=device, window=window, pairs=resolve_pairs(pairs, world.size), timeout_s=timeout_s,
                        policy=policy)
        reporter = _reporter(world, cfg, output, 2 * len(cfg.pairs) * len(size_list), None if no_fit else judge)
        return _sweep(reporter, lambda: run_p2p(world, cfg, reporter), world)

    _run(nranks, max(gpus, 2), body)


def _local_peer_matrix(size_list, output, policy) -> None:
    from .copies import print_matrices, run_peer_matrix
    from .gpu import require_gpu
    from .sweep import RunConfig
    from .world import local_world
    gpus = require_gpu("commbench p2p --device cuda")
    cfg = RunConfig(op="p2p", impls=("ce", "sm"), sizes=tuple(size_list), dtype="uint8", redop="none",
                    device="cuda", policy=policy)
    world = local_world()
    reporter = _reporter(world, cfg, output, 4 * gpus * gpus * len(size_list))
    matrices = {}

    def run():
        found, wrong = run_peer_matrix(cfg, reporter, gpus)
        matrices.update(found)
        return wrong

    wrong = _sweep(reporter, run, world)
    print_matrices(matrices, gpus, click.echo)
    sys.exit(1 if wrong else 0)


@cli.command()
@click.option("--sizes", "-s", default="4K-256M:x4", show_default=True, help="Transfer sizes in bytes.")
@click.option("--src", type=click.IntRange(min=0), default=0, show_default=True, help="Source GPU.")
@click.option("--dst", type=click.IntRange(min=0), default=None,
              help="Destination GPU of the staged and direct copies (default 1, or 0 with one GPU).")
@click.option("--staging-chunk", default="4M", show_default=True, help="Chunk of the host-staged pipeline.")
@_policy_options
def copy(sizes, src, dst, staging_chunk, output, policy) -> None:
    """Host<->device copies (pinned, pageable) and GPU->host->GPU staging beside direct P2P."""
    from .copies import run_copies
    from .gpu import require_gpu
    from .sweep import RunConfig
    from .world import local_world
    size_list = parse_sizes(sizes)
    chunk = parse_size(staging_chunk)
    if chunk <= 0:
        raise CommbenchError("--staging-chunk must be positive")
    gpus = require_gpu("commbench copy")
    dst = (1 if gpus > 1 else 0) if dst is None else dst
    for name, index in (("--src", src), ("--dst", dst)):
        if index >= gpus:
            raise CommbenchError(f"{name} {index}: only {gpus} GPU(s) visible")
    cfg = RunConfig(op="copy", impls=("pinned", "pageable", "staged", "ce"), sizes=tuple(size_list),
                    dtype="uint8", redop="none", device="cuda", policy=policy)
    world = local_world()
    reporter = _reporter(world, cfg, output, 6 * len(size_list))
    sys.exit(1 if _sweep(reporter, lambda: run_copies(cfg, reporter, src, dst, chunk), world) else 0)


def _reporter(world, cfg, output, steps, judge=None):
    """The Reporter on rank 0, None elsewhere. The result file is created (or refused) before any
    measurement starts."""
    from .reporter import Reporter, run_metadata
    made = []  # the Reporter stays on rank 0; only the success travels
    world.root_call(lambda: made.append(Reporter(run_metadata(world, cfg.describe(), sys.argv), output, steps,
                                                 timer_floor_s(cfg.device),
                                                 (lambda doc: _fit_lines(doc, judge)) if judge else None)))
    reporter = made[0] if made else None
    if reporter and world.local_size > reporter.meta["machine"]["cores"]:
        reporter.warn(f"{world.local_size} ranks share {reporter.meta['machine']['cores']} cores on "
                      f"{world.hosts[0]}: ranks compete for CPU and times inflate; remedy: use at most one "
                      f"rank per core (--np)")
    return reporter


def timer_floor_s(device: str) -> float:
    """The smallest time one sample can resolve: the host clock's step, or for device runs CUDA
    events' resolution, whichever is coarser."""
    from . import _host
    floor = _host.clock_floor()
    return max(floor, CUDA_EVENT_RESOLUTION_S) if device == "cuda" else floor


def _sweep(reporter, run, world) -> int:
    """Runs the sweep, keeping what was measured if it fails midway."""
    try:
        wrong = run()
    except CommbenchError:
        if reporter:
            reporter.finish("bad input")
        raise
    except Exception as e:  # noqa: BLE001 - any failure must still close the result file
        if reporter:
            where = f" at {reporter.current}" if reporter.current else ""
            reporter.finish(f"{type(e).__name__}{where}: {e}")
            click.echo(f"commbench: error{where}: {type(e).__name__}: {e} (measured rows kept in "
                       f"{reporter.file.path})", err=True)
        else:
            # Rank 0 may be killed by the abort before it can say anything: this rank speaks for itself.
            click.echo(f"commbench: error on rank {world.rank}: {type(e).__name__}: {e}", err=True)
        if world.comm is not None and world.size > 1:
            world.comm.Abort(1)
        sys.exit(1)
    if reporter:
        reporter.finish()
    return wrong


def _percent(text: str, flag: str) -> float:
    """'10%' or '10' -> 0.10."""
    try:
        value = float(text.strip().rstrip("%"))
    except ValueError:
        raise CommbenchError(f"{flag} {text!r}: give a percentage such as 10%") from None
    if value < 0:
        raise CommbenchError(f"{flag} {text!r}: must not be negative")
    return value / 100


@cli.command()
@click.argument("run", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print fit records as JSON.")
@_verdict_options
def fit(run, as_json, judge) -> None:
    """Fit latency (alpha) and bandwidth per (op, impl, ranks) of a result file, with verdicts."""
    import json

    from .fitreport import fits_with_verdicts
    from .results import load_document
    doc = load_document(run)
    if as_json:
        fits = fits_with_verdicts(doc["results"], _expectation(judge, doc), judge["pass_pct"], judge["fail_pct"])
        click.echo(json.dumps(fits, indent=1))
        return
    for line in _fit_lines(doc, judge):
        click.echo(line)


@cli.command()
def fabrics() -> None:
    """List the fabric catalog: expected bandwidth, typical alpha, source."""
    from .fabrics import catalog
    for row in catalog().values():
        bw = "measured here" if row.get("measured") else f"{row['bandwidth_gbps']:g} GB/s"
        click.echo(f"{row['name']:<13} {bw:>14}  alpha {row['alpha_us'][0]:g}-{row['alpha_us'][1]:g} us  "
                   f"{row['description']}; source: {row['source']}")


@cli.group()
def baseline() -> None:
    """Baselines for later comparison (a fleet repo's results/baselines)."""


@baseline.command("save")
@click.argument("run", type=click.Path(dir_okay=False))
@click.option("--name", required=True, help="Baseline name (file name without .json).")
@click.option("--dir", "directory", default=None, help="Directory (default results/baselines).")
@click.option("--keep-samples", is_flag=True, help="Keep every per-iteration sample (larger files).")
def baseline_save(run, name, directory, keep_samples) -> None:
    """Store RUN as baseline NAME; an existing baseline is never overwritten."""
    from .baseline import DEFAULT_DIR, save
    click.echo(f"saved {save(run, name, directory or DEFAULT_DIR, keep_samples)}")


@cli.command()
@click.argument("base", type=click.Path(dir_okay=False))
@click.argument("run", type=click.Path(dir_okay=False))
@click.option("--tolerance-bw", default="10%", show_default=True, help="Allowed bandwidth drop.")
@click.option("--tolerance-lat", default="25%", show_default=True, help="Allowed latency rise.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
def compare(base, run, tolerance_bw, tolerance_lat, as_json) -> None:
    """Compare RUN against BASE: exit 0 pass, 1 regression, 2 unusable input."""
    import json

    from .compare import compare as do_compare
    from .compare import compare_lines
    from .results import load_document
    result = do_compare(load_document(base), load_document(run), _percent(tolerance_bw, "--tolerance-bw"),
                        _percent(tolerance_lat, "--tolerance-lat"))
    if as_json:
        click.echo(json.dumps(result, indent=1))
    else:
        for line in compare_lines(result):
            click.echo(line)
    sys.exit(1 if result["status"] == "regression" else 0)


@cli.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="PNG file to write.")
@click.option("--baseline", "baselines", multiple=True, type=click.Path(dir_okay=False),
              help="Baseline to overlay (dashed); repeatable.")
@_verdict_options
def plot(runs, output, baselines, judge) -> None:
    """Bus bandwidth and latency against size, with fits, expected line and baselines."""
    import os

    from .plot import plot as draw
    from .results import load_document
    if os.path.exists(output):
        raise CommbenchError(f"{output} already exists; choose another -o")
    docs = [(os.path.basename(r), load_document(r)) for r in runs]
    bases = [(os.path.basename(b), load_document(b)) for b in baselines]
    draw(docs, output, bases, _expectation(judge, docs[0][1]))
    click.echo(f"wrote {output}")


@cli.command()
@click.argument("run", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(file_okay=False), help="Directory for the report.")
@_verdict_options
def report(run, output, judge) -> None:
    """Markdown and HTML report of RUN: facts, plot, fit table and verdicts."""
    from .report import write_report
    from .results import load_document
    doc = load_document(run)
    for path in write_report(run, doc, output, _expectation(judge, doc), judge["pass_pct"], judge["fail_pct"]):
        click.echo(f"wrote {path}")


@cli.command()
@click.argument("run", type=click.Path(dir_okay=False))
@click.option("--csv", "as_csv", is_flag=True, required=True, help="Comma-separated values, one row per (impl, size).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, help="File (default: stdout).")
def export(run, as_csv, output) -> None:
    """Export a result file's records (without raw samples)."""
    from .results import load, write_new
    df = load(run)
    if df.empty:
        raise CommbenchError(f"{run} holds no records to export")
    text = df.drop(columns=["samples_us"]).to_csv(index=False)
    if output:
        write_new(output, text, f"{output} already exists; choose another -o")
    else:
        click.echo(text, nl=False)


@cli.command("import")
@click.argument("tool", type=click.Choice(["nccl-tests", "osu"]))
@click.argument("log", type=click.Path(dir_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Result file (default commbench-results/<stamp>_<host>_import-<tool>.json).")
@click.option("--op", "op", type=click.Choice(["allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast",
                                               "reduce", "sendrecv"]), default=None,
              help="nccl-tests: the collective, when the log does not say.")
@click.option("--test", type=click.Choice(["latency", "bw", "allreduce"]), default=None,
              help="osu: which benchmark, when the log does not say.")
@click.option("--ranks", type=click.IntRange(min=1), default=None, help="osu_allreduce: ranks it ran on (default 2).")
def import_cmd(tool, log, output, op, test, ranks) -> None:
    """Turn nccl-tests or OSU output into a commbench result file."""
    from .importers import import_nccl_tests, import_osu
    from .results import default_path, validate, write_new
    try:
        with open(log) as f:
            text = f.read()
    except OSError as e:
        raise CommbenchError(f"cannot read {log}: {e.strerror}") from None
    doc = import_nccl_tests(text, log, op) if tool == "nccl-tests" else import_osu(text, log, test, ranks)
    validate(doc, log)
    path = output or default_path(f"import-{tool}")
    write_new(path, doc, f"{path} already exists; choose another -o")
    click.echo(f"imported {len(doc['results'])} records from {log} into {path}")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the snapshot as JSON.")
def topo(as_json) -> None:
    """Inventory of GPUs (NVML), host, NUMA, NICs, InfiniBand and library versions."""
    import json

    from .topo import snapshot
    snap = snapshot()
    if as_json:
        click.echo(json.dumps(snap, indent=1))
        return
    for line in _topo_lines(snap):
        click.echo(line)


def _topo_lines(snap: dict) -> list[str]:
    h, g, lib = snap["host"], snap["gpus"], snap["libraries"]
    lines = [f"host {h['hostname']}: {h['cpu_model']}, {h['sockets']} socket(s), {h['cores']} cores, "
             f"{h['memory_bytes'] / 2**30:.1f} GiB, kernel {h['kernel']}"]
    for n in h["numa_nodes"]:
        mem = f"{n['memory_bytes'] / 2**30:.1f} GiB" if n["memory_bytes"] else "memory unknown"
        lines.append(f"  NUMA node {n['node']}: CPUs {n['cpus']}, {mem}")
    for n in h["nics"]:
        if n["type"] == "loopback":
            continue
        speed = f"{n['speed_mbps']} Mb/s" if n["speed_mbps"] else "speed unknown"
        lines.append(f"  NIC {n['name']}: {n['type']}{' (virtual)' if n['virtual'] else ''}, {n['state']}, "
                     f"MTU {n['mtu']}, {speed}")
    lines.append("  InfiniBand: " + ("; ".join(f"{p['hca']}/{p['port']} {p['state']} {p['rate_gbps']} Gb/s "
                                              f"{p['link_layer']}" for p in h["infiniband"]) or "none"))
    if not g["available"]:
        lines.append(f"GPUs: none ({g['reason']})")
    else:
        lines.append(f"GPUs: {len(g['devices'])}, driver {g['driver']}, CUDA {g['cuda_driver']}")
        for d in g["devices"]:
            p, nv = d["pcie"], d["nvlink"]
            lines.append(f"  GPU {d['index']} {d['name']} {d['pci_bus_id']}: PCIe Gen{p['gen_current']}/{p['gen_max']} "
                         f"x{p['width_current']}/{p['width_max']}, NVLink {nv['links_up']}/{nv['links_total']}, "
                         f"CPUs {d['cpu_affinity']}, NUMA {d['numa_node']}, {d['temperature_c']} C, "
                         f"{d['power_w']}/{d['power_limit_w']} W, events: {', '.join(d['clock_event_reasons']) or 'none'}")
        n = len(g["devices"])
        lines.append("  topology " + "".join(f"{'GPU' + str(j):>7}" for j in range(n)))
        for i, row in enumerate(snap["topology"]):
            lines.append(f"  GPU{i:<6}" + "".join(f"{c:>7}" for c in row))
    lines.append(f"libraries: MPI {lib['mpi']}, NCCL {lib['nccl']}, torch {lib['torch']}")
    lines.append(f"fingerprint: {snap['fingerprint']}")
    return lines


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
@click.option("--from", "source", type=click.Path(dir_okay=False), default=None,
              help="Judge a snapshot saved by 'commbench topo --json' instead of this node.")
@click.option("--expect", type=click.Path(dir_okay=False), default=None,
              help='Node-class description (JSON), e.g. {"gpus": 8, "nvlinks_per_gpu": 18, "pcie_gen": 5}.')
def doctor(as_json, source, expect) -> None:
    """Preflight health checks; exit 1 when any check fails."""
    import json

    from .doctor import as_json as checks_json
    from .doctor import exit_status, run_checks
    from .topo import snapshot
    snap = _load_json(source, "--from") if source else snapshot()
    if not isinstance(snap, dict) or snap.get("schema") != "commbench-topo-1":
        raise CommbenchError(f"--from {source}: not a snapshot from 'commbench topo --json'")
    checks = run_checks(snap, _load_json(expect, "--expect") if expect else None)
    if as_json:
        click.echo(json.dumps({"fingerprint": snap.get("fingerprint"), "checks": checks_json(checks),
                               "status": "FAIL" if exit_status(checks) else "PASS"}, indent=1))
    else:
        for c in checks:
            click.echo(f"{c.status:<5} {c.name:<18} {c.evidence}" + (f"\n{'':24}remedy: {c.remedy}" if c.remedy and c.status != "PASS" else ""))
        counts = {s: sum(1 for c in checks if c.status == s) for s in ("FAIL", "WARN", "PASS")}
        click.echo(f"doctor: {counts['FAIL']} FAIL, {counts['WARN']} WARN, {counts['PASS']} PASS")
    sys.exit(exit_status(checks))


def _load_json(path: str, flag: str):
    import json
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        raise CommbenchError(f"{flag} {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise CommbenchError(f"{flag} {path} is not JSON: {e}") from None


@cli.command()
@click.option("--verbose", "-v", is_flag=True, help="List the native parts and library versions.")
def version(verbose: bool) -> None:
    """Print the version (and, with -v, what is built)."""
    click.echo(f"commbench {__version__}")
    if verbose:
        from . import machine
        import torch
        try:
            from . import _host  # noqa: F401
            host = "built"
        except ImportError as e:
            host = f"missing ({e})"
        click.echo(f"native host extension (commbench._host): {host}")
        from .gpu import cuda_absence, cuda_module, visible_gpus
        mod = cuda_module()
        if mod is None:
            click.echo(f"CUDA extension (commbench._cuda): absent: {cuda_absence()}")
        else:
            click.echo(f"CUDA extension (commbench._cuda): built; {mod.versions()}")
            gpus, why = visible_gpus()
            click.echo(f"GPUs visible: {gpus}" + (f" ({why})" if why else ""))
        click.echo(f"MPI: {machine.mpi_version() or 'not available'}"
                   + (" (CUDA-aware)" if host == "built" and _host.mpi_cuda_aware() else ""))
        click.echo(f"torch: {torch.__version__} (CUDA {torch.version.cuda or 'none'})")


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("commbench: aborted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(2)
    except CommbenchError as e:
        if launch_rank() in (None, 0):  # one line from the whole job, not one per rank
            click.echo(f"commbench: error: {e}", err=True)
        sys.exit(e.exit_code)
