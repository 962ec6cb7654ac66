"""What the commands share: option groups, running a body on every rank, the result file's reporter
and the sweep's failure handling."""

from __future__ import annotations

import functools
import math
import subprocess
import sys
from typing import Optional

import click

from ..errors import CommbenchError
from ..gpu import CUDA_EVENT_RESOLUTION_S, DEFAULT_TIMEOUT_S
from ..policy import Policy
from ..world import detect_launcher, init_world, standalone_command


def policy_options(f):
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


def verdict_options(f):
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
        from ..fabrics import catalog
        if fabric is not None and fabric not in catalog():
            raise CommbenchError(f"unknown fabric '{fabric}': choose from {', '.join(catalog())}, or give --expect-gbps")
        if fail_pct > pass_pct:
            raise CommbenchError(f"--fail-pct {fail_pct:g} exceeds --pass-pct {pass_pct:g}")
        kwargs["judge"] = {"fabric": fabric, "expect_gbps": expect_gbps, "expect_us": expect_us,
                           "pass_pct": pass_pct, "fail_pct": fail_pct}
        return f(*args, **kwargs)
    return wrapper


def expectation(judge: dict, meta: dict):
    """The fabric to judge against: named, given as figures, or guessed from the run's topology."""
    from ..fabrics import expectation, guess_fabric
    return expectation(judge["fabric"] or (None if judge["expect_gbps"] else guess_fabric(meta)),
                       judge["expect_gbps"], judge["expect_us"])


def fit_lines_for(doc: dict, judge: dict) -> list[str]:
    from ..fitreport import fit_lines, fits_with_verdicts
    return fit_lines(fits_with_verdicts(doc["results"], expectation(judge, doc), judge["pass_pct"], judge["fail_pct"]))


def finite_positive(ctx, param, value):
    if value is not None and not (math.isfinite(value) and value > 0):
        raise click.BadParameter(f"{value} is not a positive number of seconds", ctx, param)
    return value


def timeout_option(f):
    return click.option("--timeout", "timeout_s", type=float, default=DEFAULT_TIMEOUT_S, show_default=True,
                        callback=finite_positive,
                        help="GPU: seconds one timed call may wait for its peers; then the NCCL communicator "
                             "is aborted and the run ends with exit 1, keeping the rows measured so far.")(f)


def ranks_option(f):
    return click.option("--np", "nranks", type=click.IntRange(min=1), default=None,
                        help="Ranks to spawn when no launcher is present (default: one per visible GPU "
                             "with --device cuda, else 2).")(f)


def run_ranks(nranks: Optional[int], default_ranks: int, body) -> None:
    """Runs body(world) on every rank; with no launcher, first re-runs this command under the
    bundled mpirun. Exit status: 0 exact, 1 wrong elements or a failure midway, 2 bad input."""
    if detect_launcher() is None:
        from ..machine import cores
        from ..reporter import PROGRESS_MARK
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


def resolve_device(device: str, impl_text: Optional[str]) -> tuple[str, int]:
    """('cpu' or 'cuda', visible GPUs). auto picks cuda when a GPU is visible, or when the impls
    asked for only run there."""
    from ..gpu import require_gpu, visible_gpus
    gpus, _ = visible_gpus()
    if device == "auto":
        wants_gpu = impl_text is not None and "nccl" in impl_text.split(",")
        device = "cuda" if gpus or wants_gpu else "cpu"
    if device == "cuda":
        gpus = require_gpu("--device cuda" if not impl_text else f"--impl {impl_text}")
    return device, gpus


def make_reporter(world, cfg, output, steps, judge=None):
    """The Reporter on rank 0, None elsewhere. The result file is created (or refused) before any
    measurement starts."""
    from ..reporter import Reporter, run_metadata
    made = []  # the Reporter stays on rank 0; only the success travels
    world.root_call(lambda: made.append(Reporter(run_metadata(world, cfg.describe(), sys.argv), output, steps,
                                                 timer_floor_s(cfg.device),
                                                 (lambda doc: fit_lines_for(doc, judge)) if judge else None)))
    reporter = made[0] if made else None
    if reporter and world.local_size > reporter.meta["machine"]["cores"]:
        reporter.warn(f"{world.local_size} ranks share {reporter.meta['machine']['cores']} cores on "
                      f"{world.hosts[0]}: ranks compete for CPU and times inflate; remedy: use at most one "
                      f"rank per core (--np)")
    return reporter


def timer_floor_s(device: str) -> float:
    """The smallest time one sample can resolve: the host clock's step, or for device runs CUDA
    events' resolution, whichever is coarser."""
    from .. import _host
    floor = _host.clock_floor()
    return max(floor, CUDA_EVENT_RESOLUTION_S) if device == "cuda" else floor


def sweep(reporter, run, world) -> int:
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


def percent(text: str, flag: str) -> float:
    """'10%' or '10' -> 0.10."""
    try:
        value = float(text.strip().rstrip("%"))
    except ValueError:
        raise CommbenchError(f"{flag} {text!r}: give a percentage such as 10%") from None
    if value < 0:
        raise CommbenchError(f"{flag} {text!r}: must not be negative")
    return value / 100
