"""What the commands share: option groups, running a body on every rank, the result file's reporter
and the sweep's failure handling."""

from __future__ import annotations

import functools
import math
import socket
import subprocess
import sys
import time
from typing import NoReturn, Optional

import click

from ..errors import CommbenchError
from ..gpu import CUDA_EVENT_RESOLUTION_S, DEFAULT_TIMEOUT_S
from ..policy import Policy
from ..world import detect_launcher, init_world, standalone_command

# How long a rank other than 0 waits, after a failure of its own, before it speaks and ends the job:
# when rank 0 failed as well, rank 0's abort ends this rank first, and the job prints one line.
RANK_SPEAKS_AFTER_S = 2.0


class Finite(click.FloatRange):
    """A FloatRange that also refuses nan and inf: nan passes every comparison a range makes, and
    neither is a number of anything."""

    name = "finite number"

    def convert(self, value, param, ctx):
        value = super().convert(value, param, ctx)
        if not math.isfinite(value):
            self.fail(f"{value} is not a finite number.", param, ctx)
        return value


def one_line(text: str) -> str:
    """An error message as the single line the user gets."""
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


def policy_options(f):
    @click.option("--warmup", type=click.IntRange(min=0), default=5, show_default=True,
                  help="Warm-up iterations per size (adaptive mode caps them at half the budget).")
    @click.option("--iters", type=click.IntRange(min=1), default=None,
                  help="Fixed number of timed iterations per size (default: from --budget-ms).")
    @click.option("--budget-ms", type=Finite(min=0, min_open=True), default=200.0, show_default=True,
                  help="Time budget for the timed iterations of one size.")
    @click.option("--min-iters", type=click.IntRange(min=1), default=5, show_default=True,
                  help="Floor on timed iterations per size.")
    @click.option("--max-iters", type=click.IntRange(min=1), default=2000, show_default=True,
                  help="Ceiling on timed iterations per size.")
    @click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
                  help="Result file (default commbench-results/<UTC stamp>-<pid>_<host>_<op>.json); never overwritten.")
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
    @click.option("--expect-gbps", type=Finite(min=0, min_open=True), default=None,
                  help="Expected link bandwidth (GB/s) for a fabric the catalog lacks.")
    @click.option("--expect-us", type=Finite(min=0), default=None, help="Expected per-message alpha (us).")
    @click.option("--pass-pct", type=Finite(0, 100), default=80.0, show_default=True,
                  help="PASS at or above this percent of the expected bandwidth.")
    @click.option("--fail-pct", type=Finite(0, 100), default=60.0, show_default=True,
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


def timeout_option(f):
    return click.option("--timeout", "timeout_s", type=Finite(min=0, min_open=True), default=DEFAULT_TIMEOUT_S,
                        show_default=True,
                        help="GPU: seconds one timed call may wait for its peers; then the NCCL communicator "
                             "is aborted and the run ends with exit 1, keeping the rows measured so far.")(f)


def ranks_option(f):
    return click.option("--np", "nranks", type=click.IntRange(min=1), default=None,
                        help="Ranks to spawn when no launcher is present (default: one per visible GPU "
                             "with --device cuda, else 2).")(f)


def run_ranks(nranks: Optional[int], default_ranks: int, body, checks) -> None:
    """Runs body(world) on every rank, after `checks` (a preflight.Checks) passed: with no launcher,
    in this process before it re-runs the command under the bundled mpirun; under a launcher, on
    rank 0 before any measurement. Exit status: 0 exact, 1 wrong elements or a failure midway, 2 bad
    input."""
    if detect_launcher() is None:
        from ..machine import cores
        from ..reporter import PROGRESS_MARK
        ranks = nranks or default_ranks
        checks.run(ranks, ranks, socket.gethostname())
        argv, env, notes = standalone_command(sys.argv[1:], ranks, cores())
        if sys.stderr.isatty():
            env[PROGRESS_MARK] = "1"
        for n in notes:
            click.echo(f"commbench: {n}", err=True)
        sys.exit(subprocess.call(argv, env=env))
    world = init_world()
    if nranks is not None and nranks != world.size:
        raise CommbenchError(f"--np {nranks} given but the launcher started {world.size} ranks; drop --np under a launcher")
    try:
        world.root_call(lambda: checks.run(world.size, world.local_size, world.hosts[0]))
        wrong = body(world)
    except CommbenchError:
        raise
    except Exception as e:  # noqa: BLE001 - before the sweep (a transport that fails to start) as in it
        _fail(None, world, e)
    finally:
        world.close()
    sys.exit(1 if wrong else 0)


def resolve_device(device: str, impl_text: Optional[str], gpu_only=()) -> tuple[str, int]:
    """('cpu' or 'cuda', visible GPUs). auto picks cuda when a GPU is visible, or when an impl asked
    for is one of `gpu_only`, those that run on GPUs alone."""
    from ..gpu import require_gpu, visible_gpus
    gpus, _ = visible_gpus()
    if device == "auto":
        wants_gpu = impl_text is not None and any(n.strip() in gpu_only for n in impl_text.split(","))
        device = "cuda" if gpus or wants_gpu else "cpu"
    if device == "cuda":
        gpus = require_gpu("--device cuda" if not impl_text else f"--impl {impl_text}")
    return device, gpus


def make_reporter(world, cfg, output, steps, judge=None):
    """The Reporter on rank 0, None elsewhere. The result file is created (or refused) before any
    measurement starts."""
    from ..machine import typed_command
    from ..reporter import Reporter, run_metadata
    made = []  # the Reporter stays on rank 0; only the success travels
    world.root_call(lambda: made.append(Reporter(run_metadata(world, cfg.describe(), typed_command(sys.argv)), output,
                                                 steps, timer_floor_s(cfg.device),
                                                 (lambda doc: fit_lines_for(doc, judge)) if judge else None)))
    reporter = made[0] if made else None
    if reporter:
        click.echo(f"# policy: {cfg.policy.rule()}")
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
    """Runs the sweep. Bad input found before any row was measured leaves no result file; any other
    failure keeps the rows measured so far and ends every rank (see _fail)."""
    try:
        wrong = run()
        if reporter:
            reporter.finish()
        return wrong
    except CommbenchError as e:
        if reporter:
            reporter.refuse(str(e))
        raise
    except Exception as e:  # noqa: BLE001 - any failure must still close the result file and end the job
        _fail(reporter, world, e)


def _fail(reporter, world, error: Exception) -> NoReturn:
    """One line, the rows kept, every rank ended, whatever else fails on the way: the full disk that
    failed the sweep refuses the failed file's last write too, and a rank left waiting in a
    collective would hang the job."""
    abort = world.comm is not None and world.size > 1
    try:
        if reporter:
            where = f" at {reporter.current}" if reporter.current else ""
            kept = reporter.fail(f"{type(error).__name__}{where}: {error}")
            click.echo(one_line(f"commbench: error{where}: {type(error).__name__}: {error} ({kept})"), err=True)
            reporter.summary()
        else:
            if abort and world.rank != 0:
                time.sleep(RANK_SPEAKS_AFTER_S)
            click.echo(one_line(f"commbench: error on rank {world.rank}: {type(error).__name__}: {error}"), err=True)
    finally:
        if abort:
            world.comm.Abort(1)
        sys.exit(1)


def percent(text: str, flag: str) -> float:
    """'10%' or '10' -> 0.10."""
    try:
        value = float(text.strip().rstrip("%"))
    except ValueError:
        raise CommbenchError(f"{flag} {text!r}: give a percentage such as 10%") from None
    if not math.isfinite(value):
        raise CommbenchError(f"{flag} {text!r}: give a finite percentage such as 10%")
    if value < 0:
        raise CommbenchError(f"{flag} {text!r}: must not be negative")
    return value / 100
