"""What the commands share: option groups, running a body on every rank, the result file's reporter
and the sweep's failure handling."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import os
import socket
import sys
import time
from typing import Callable, NoReturn, Optional

import click

from .. import trace
from ..errors import CommbenchError, described, one_line
from ..launch import events, startup, supervise
from ..launch.world import (
    detect_launcher,
    init_world,
    launch_rank,
    session_base,
    standalone_command,
)
from ..node.gpu import CUDA_EVENT_RESOLUTION_S, DEFAULT_TIMEOUT_S
from ..run.policy import TIMINGS, Policy

# How long a rank other than 0 waits, after a failure of its own, before it speaks and ends the job:
# when rank 0 failed as well, rank 0's abort ends this rank first, and the job prints one line.
RANK_SPEAKS_AFTER_S = 2.0
# The largest seed an option takes: one that JSON readers keep exact (a 40-digit seed read back as
# 1e+40, and a stored seed must repeat its run).
MAX_SEED = 2**63 - 1


def given_options(ignored: set[str]) -> list[str]:
    """The options of the running command typed on its command line (or set through the environment)
    that are not in `ignored` (parameter names), as their first flag: for a mode that reads none of
    them, which must say so rather than drop them."""
    ctx = click.get_current_context()
    typed = (click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.ENVIRONMENT)
    return [p.opts[0] for p in ctx.command.params
            if isinstance(p, click.Option) and p.name not in ignored and ctx.get_parameter_source(p.name) in typed]


class Finite(click.FloatRange):
    """A FloatRange that also refuses nan and inf: nan passes every comparison a range makes, and
    neither is a number of anything."""

    name = "finite number"

    def convert(self, value, param, ctx):
        value = super().convert(value, param, ctx)
        if not math.isfinite(value):
            self.fail(f"{value} is not a finite number.", param, ctx)
        return value


# The most iterations of one size: each keeps its per-rank times (8 bytes a rank), and no sweep of
# nccl-tests or OSU comes near it.
MAX_ITERATIONS = 1_000_000
# The most calls in one timed iteration (--agg): NCCL takes a group's calls on the host before the
# first starts; more calls per sample are what --timing loop is for.
MAX_AGG = 1024
# The most messages in flight in a bandwidth iteration (--window): OSU's default is 64; a window is
# posted at once, each message a request the library tracks.
MAX_WINDOW = 65536


def policy_options(f):
    @click.option("--warmup", "-w", type=click.IntRange(min=0, max=MAX_ITERATIONS), default=5, show_default=True,
                  help="Warm-up iterations per size (adaptive mode caps them at half the budget; -w as in nccl-tests).")
    @click.option("--iters", "-n", type=click.IntRange(min=1, max=MAX_ITERATIONS), default=None,
                  help="Fixed number of timed iterations per size (default: from --budget-ms; -n as in nccl-tests).")
    @click.option("--budget-ms", type=Finite(min=0, min_open=True), default=200.0, show_default=True,
                  help="Time budget for the timed iterations of one size.")
    @click.option("--min-iters", type=click.IntRange(min=1, max=MAX_ITERATIONS), default=5, show_default=True,
                  help="Floor on timed iterations per size.")
    @click.option("--max-iters", type=click.IntRange(min=1, max=MAX_ITERATIONS), default=2000, show_default=True,
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


def timing_options(f):
    """--timing and --loops, folded into the policy that policy_options made (apply it below that)."""
    @click.option("--timing", type=click.Choice(TIMINGS), default="per-iteration", show_default=True,
                  help="per-iteration: each iteration timed alone (a collective's after a barrier, the slowest "
                       "rank's time; GPUs: device time only); loop: nccl-tests' convention, N iterations back to "
                       "back between two timestamps, the time per iteration (a collective's averaged over the "
                       "ranks).")
    @click.option("--loops", type=click.IntRange(min=1, max=1000), default=None,
                  help="--timing loop: loops per size, the spread's samples (default 5); N iterations each "
                       "(-n, or from --budget-ms).")
    @functools.wraps(f)
    def wrapper(*args, timing, loops, policy, **kwargs):
        if loops is not None and timing != "loop":
            raise CommbenchError("--loops counts the loops of --timing loop; give --timing loop too")
        return f(*args, policy=dataclasses.replace(policy, timing=timing, loops=loops or policy.loops), **kwargs)
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
        from ..analysis.fabrics import catalog
        if fabric is not None and fabric not in catalog():
            raise CommbenchError(f"unknown fabric '{fabric}': choose from {', '.join(catalog())}, or give --expect-gbps")
        if fail_pct > pass_pct:
            raise CommbenchError(f"--fail-pct {fail_pct:g} exceeds --pass-pct {pass_pct:g}")
        if fabric is not None and expect_gbps is not None:
            raise CommbenchError(f"--fabric {fabric} and --expect-gbps {expect_gbps:g} both say what to expect: give "
                                 f"one (--expect-us may go with either)")
        kwargs["judge"] = {"fabric": fabric, "expect_gbps": expect_gbps, "expect_us": expect_us,
                           "pass_pct": pass_pct, "fail_pct": fail_pct}
        return f(*args, **kwargs)
    return wrapper


def expectation(judge: dict, meta: dict, source: str = "the run"):
    """The fabric to judge the run `meta` against: named, given as figures, or guessed from the run's
    topology; a fabric measured on the spot, as the run measured it."""
    from ..analysis.fabrics import expectation, guess_fabric
    return expectation(judge["fabric"] or (None if judge["expect_gbps"] else guess_fabric(meta)),
                       judge["expect_gbps"], judge["expect_us"], meta.get("on_the_spot"), source)


def fit_lines_for(doc: dict, judge: dict, source: str = "the run") -> list[str]:
    """The fit with its verdicts, then the run placed in the reference envelopes of its node."""
    from ..analysis import envelopes
    from ..analysis.verdicts import fit_lines, fits_with_verdicts
    return fit_lines(fits_with_verdicts(doc["results"], expectation(judge, doc, source), judge["pass_pct"],
                                        judge["fail_pct"])) + [f"# {line}" for line in envelopes.lines(doc)]


# The shortest --timeout: the watchdog looks every TICK_S (0.25 s), and a rank needs its peers' news.
MIN_TIMEOUT_S = 1.0


def timeout_option(f):
    return click.option("--timeout", "timeout_s", type=Finite(min=MIN_TIMEOUT_S), default=DEFAULT_TIMEOUT_S,
                        show_default=True,
                        help="Seconds one size may take on every rank (GPU: one timed call may wait for its peers); "
                             "then every rank ends with one line naming the size and the ranks that did not "
                             "arrive, exit 1, the rows measured so far kept.")(f)


def ranks_option(f):
    return click.option("--np", "nranks", type=click.IntRange(min=1), default=None,
                        help="Ranks to spawn when no launcher is present (default: one per visible GPU "
                             "with --device cuda, else 2).")(f)


class Checked(Exception):
    """Raised, under check_only(), where a measuring command would start its ranks or measure: every
    check of its input passed. `ranks`: how many it would start, measuring `device` ('cpu', 'cuda');
    `measurements`: the sizes it would measure (its progress bar's steps), each under `policy` (None
    where the command times no budget: numerics)."""

    def __init__(self, ranks: int, device: str, measurements: int = 0, policy=None):
        super().__init__(ranks, device)
        self.ranks, self.device, self.measurements, self.policy = ranks, device, measurements, policy


_checking = False


@contextlib.contextmanager
def check_only():
    """Inside, a measuring command checks everything it checks before it starts (its options' values,
    the preflight of its ranks) and raises Checked instead of starting: accept checks a plan's steps
    so, each as its command would, before the first step runs."""
    global _checking
    _checking = True
    try:
        yield
    finally:
        _checking = False


def run_ranks(nranks: Optional[int], default_ranks: int, body, checks, timeout_s: float,
              measurements: Callable[[int], int] = lambda ranks: 0, policy=None) -> None:
    """Runs body(world) on every rank, after `checks` (a preflight.Checks) passed: with no launcher,
    in this process before it re-runs the command under the bundled mpirun; under a launcher, on
    rank 0 before any measurement. `timeout_s` (--timeout) bounds the ranks' meeting too;
    `measurements(ranks)` and `policy`: what Checked says under check_only(). Exit status: 0 exact,
    1 wrong elements or a failure midway, 2 bad input."""
    if _checking:
        ranks = nranks or default_ranks
        checks.run(ranks, ranks, socket.gethostname())
        raise Checked(ranks, checks.device, measurements(ranks), policy)
    if detect_launcher() is None:
        from ..node.machine import cores
        from ..run.reporter import PROGRESS_MARK
        ranks = nranks or default_ranks
        checks.run(ranks, ranks, socket.gethostname())
        trace.phase("checks")
        argv, env = standalone_command(sys.argv[1:], ranks, cores(), gpu=checks.device == "cuda")
        if sys.stderr.isatty():
            env[PROGRESS_MARK] = "1"
        with session_base(env) as env:
            ended = supervise.launch(argv, env, timeout_s)
        trace.phase("ranks-ended")
        supervise.say(ended)
        sys.exit(ended.status)
    checks.before_joining(detect_launcher())
    # MPI's start-up is bounded as a size is (launch/startup.py); torchrun's rendezvous bounds its own.
    started = startup.arm(timeout_s, launch_rank()) if detect_launcher() == "mpi" else None
    try:
        world = init_world(timeout_s)
    finally:
        if started is not None:
            started()
    trace.phase("mpi-init" if world.comm is not None else "world-init")
    events.rank_started(world.rank)
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
    sys.exit(events.rank_status(world.rank, 1 if wrong else 0))


def resolve_device(device: str, impl_text: Optional[str], wants_gpu: bool = False) -> tuple[str, int]:
    """('cpu' or 'cuda', visible GPUs; 0 for cpu). auto picks cuda when a GPU is visible, or when the
    impls asked for want one (`wants_gpu`: one of them runs on GPUs alone)."""
    if device == "cpu":
        return "cpu", 0  # without asking CUDA: a CPU run's parent never loads torch and its CUDA runtime
    from ..node.gpu import gpus_on_host, require_gpu, visible_gpus
    gpus, why = visible_gpus()
    if device == "auto":
        present = gpus_on_host()
        # GPUs that CUDA cannot use are a fault to fix, not a reason to measure the CPU instead; GPUs
        # hidden on purpose (CUDA_VISIBLE_DEVICES) are not.
        if not gpus and present and "CUDA_VISIBLE_DEVICES" not in os.environ:
            raise CommbenchError(f"--device auto: this host has GPUs ({', '.join(present)}) but CUDA cannot use them: "
                                 f"{why}; --device cpu measures the CPU")
        device = "cuda" if gpus or wants_gpu else "cpu"
    if device == "cuda":
        gpus = require_gpu("--device cuda" if not impl_text else f"--impl {impl_text}")
    return device, gpus


def attach_nccl_log(world, output) -> None:
    """After a sweep over NCCL (whose log transports.nccl.log_connections asked for before NCCL
    started): the transports its connections took, its channel counts and the network device each
    rank sent through, as every rank's log says them, into the result file of `output` (rank 0's).
    Collective."""
    from ..transports.nccl import chosen_transports, init_channels, used_nics
    found, channels, nics = chosen_transports(world), init_channels(world), used_nics(world)
    trace.phase("nccl-log")  # every rank's NCCL log read
    if output:
        for key, value in (("nccl_transports", found), ("nccl_channels", channels), ("nccl_nics", nics)):
            if value is not None:
                output.attach(key, value)


def open_output(world, cfg, output, steps, judge=None, config: Optional[dict] = None, fit: bool = True,
                devices: Optional[list[int]] = None):
    """The Reporter on rank 0, None elsewhere: the result file is created (or refused) before any
    measurement starts. `config`: what the command records of its own beside cfg's; `devices`: the
    GPUs a command of one process drives (gpu_layout). `judge` (verdict_options): the fabric the fit
    after the table (unless not `fit`) is judged against; none where the ranks share a GPU. Then
    measure_fabric, where a fabric is judged, and watchdog.start (--timeout): separate calls."""
    if _checking:  # a command of one process (copy, the peer matrix): its checks are behind it
        raise Checked(world.size, cfg.device, steps, cfg.policy)
    from ..node.machine import typed_command
    from ..run.reporter import Reporter, run_metadata
    made = []  # the Reporter stays on rank 0; only the success travels
    config = {**cfg.describe(), **(config or {})}
    if cfg.device == "cuda":
        from ..node.affinity import bind_rank
        from ..node.gpu import gpu_layout
        # A rank's CPUs beside its GPU's, before NCCL starts (a command of one process binds per GPU).
        binding = bind_rank(world) if devices is None and world.launcher != "local" else None
        config.update(gpu_layout(world, devices, binding))  # collective: every rank says which GPU it took
        if config.get("shared_gpu"):
            judge = None  # the shared-GPU functional test: times that are not the GPU's
    world.root_call(lambda: made.append(Reporter(run_metadata(world, config,
                                                   typed_command(sys.argv)), output,
                                                 steps, timer_floor_s(cfg.device),
                                                 (lambda doc: fit_lines_for(doc, judge)) if judge and fit else None)))
    reporter = made[0] if made else None
    trace.phase("topology")  # rank 0's snapshot and the result file's header
    if reporter:
        click.echo(f"# policy: {cfg.policy.rule()}")
    for warning in ("binding_warning", "cpu_binding_warning"):
        if reporter and config.get(warning):
            reporter.warn(config[warning])
    if reporter and world.local_size > reporter.meta["machine"]["cores"]:
        reporter.warn(f"{world.local_size} ranks share {reporter.meta['machine']['cores']} cores on "
                      f"{world.hosts[0]}: ranks compete for CPU and times inflate; remedy: use at most one "
                      f"rank per core (--np)")
    return reporter


def measure_fabric(world, reporter, judge) -> None:
    """Rank 0, before the sweep: the fabric `judge` names, where it is one measured on the spot (the
    host's own memory copy), measured now and kept in the file (open_output's reporter)."""
    if not (reporter and judge and judge["fabric"]) or reporter.meta["config"].get("shared_gpu"):
        return
    from ..analysis.fabrics import measure_on_the_spot, measured_here
    if measured_here(judge["fabric"]):
        reporter.attach("on_the_spot", {judge["fabric"]: measure_on_the_spot(judge["fabric"], world.hosts[0])})
        trace.phase("fabric-on-the-spot")


def timer_floor_s(device: str) -> float:
    """The smallest time one sample can resolve: the host clock's step, or for device runs CUDA
    events' resolution, whichever is coarser."""
    from .. import _host
    floor = _host.clock_floor()
    return max(floor, CUDA_EVENT_RESOLUTION_S) if device == "cuda" else floor


def sweep(reporter, run, world) -> int:
    """Runs the sweep. Bad input found before any row was measured leaves no result file; any other
    failure keeps the rows measured so far and ends every rank (see _fail)."""
    from ..launch import watchdog
    try:
        trace.phase("before-measuring")
        wrong = run()
        trace.phase("measured")
        watchdog.finish()
        if reporter:
            reporter.finish()
            trace.phase("written")
        return wrong
    except CommbenchError as e:
        watchdog.stop()
        if reporter:
            reporter.refuse(str(e))
        raise
    except Exception as e:  # noqa: BLE001 - any failure must still close the result file and end the job
        _fail(reporter, world, e)


def _fail(reporter, world, error: Exception) -> NoReturn:
    """One line, the rows kept, every rank ended, whatever else fails on the way: the full disk that
    failed the sweep refuses the failed file's last write too, and a rank left waiting in a
    collective would hang the job. With a watchdog running, it reports: it also knows which ranks
    are gone."""
    from ..launch import watchdog
    error = _with_nccl_warnings(error)
    if watchdog.current() is not None:
        watchdog.current().fail(error)
    abort = world.comm is not None and world.size > 1
    try:
        if reporter and (closed := watchdog.output_closed(error)):
            # After the last size (the watchdog stopped, which says it while a size runs): the launch
            # is ending the job, and no line of this rank reaches anyone; the file says it.
            where = watchdog.current().where if watchdog.current() is not None else \
                "after the last size" if reporter.records else watchdog.UNARMED
            reporter.fail(f"{where}: interrupted ({closed})", "interrupted")
        elif reporter:
            where = f" at {reporter.current}" if reporter.current else ""
            said = described(error)
            kept = reporter.fail(f"{type(error).__name__}{where}: {error}" if said.startswith(type(error).__name__)
                                 else f"{said}{where}")
            click.echo(one_line(f"commbench: error{where}: {described(error)} ({kept})"), err=True)
            reporter.summary()
        else:
            if abort and world.rank != 0:
                time.sleep(RANK_SPEAKS_AFTER_S)
            click.echo(one_line(f"commbench: error on rank {world.rank}: {described(error)}"), err=True)
    finally:
        if abort:
            world.comm.Abort(1)
        sys.exit(1)


def _with_nccl_warnings(error: Exception) -> Exception:
    """The error with what NCCL warned of in this rank's log beside its last error (the cause, and a
    remedy such as NCCL_NVLS_ENABLE=0), where it said more; else the error as it is."""
    from ..transports.nccl import warnings_said
    said = warnings_said(str(error))
    if not said:
        return error
    try:
        return type(error)(f"{error}; NCCL warned: {said}")
    except Exception:  # noqa: BLE001 - an exception type that takes no text keeps its own
        return error


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
