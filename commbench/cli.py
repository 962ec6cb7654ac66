"""Command line: parse, choose, print. No measurement logic lives here."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from typing import Optional

import click

from . import __version__
from .errors import CommbenchError
from .policy import Policy
from .sizes import parse_size, parse_sizes, round_to_itemsize
from .spec import DTYPES, REDOPS, dtype_of, redop_code
from .world import detect_launcher, init_world, standalone_command


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
    @click.option("--np", "nranks", type=click.IntRange(min=1), default=None,
                  help="Ranks to spawn when no launcher is present (default 2 on a host without GPUs).")
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


def _run(nranks: Optional[int], output: Optional[str], body) -> None:
    """Runs body(world) on every rank; with no launcher, first re-runs this command under the
    bundled mpirun. Exit status: 0 exact, 1 wrong elements or a failure midway, 2 bad input."""
    if detect_launcher() is None:
        from .machine import cores
        from .reporter import PROGRESS_MARK
        argv, env, notes = standalone_command(sys.argv[1:], nranks or 2, cores())
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
              help="Comma list of mpi, ring, tree, gloo (default: all; gloo only under torchrun).")
@click.option("--dtype", "-d", default="float32", show_default=True, help=f"One of {', '.join(DTYPES)}.")
@click.option("--op", "redop", default="sum", show_default=True, help=f"Reduction: {', '.join(REDOPS)}.")
@click.option("--in-place/--out-of-place", default=False, show_default=True)
@click.option("--chunk", default="1M", show_default=True, help="Tree pipeline chunk size in bytes.")
@_policy_options
def allreduce(sizes, impl_text, dtype, redop, in_place, chunk, nranks, output, policy) -> None:
    """Time all-reduce implementations across message sizes."""
    from .backends import ALLREDUCE_IMPLS, parse_impls
    from .sweep import RunConfig, run_allreduce
    torch_dtype = dtype_of(dtype)
    redop_code(redop)
    itemsize = torch_dtype.itemsize
    size_list, notes = round_to_itemsize(parse_sizes(sizes), itemsize)
    chunk_bytes = parse_size(chunk)
    if chunk_bytes < itemsize:
        raise CommbenchError(f"--chunk {chunk} is smaller than one {dtype} element")
    default_impls = "gloo" if detect_launcher() == "torchrun" else ",".join(ALLREDUCE_IMPLS)
    impls = parse_impls(impl_text or default_impls, ALLREDUCE_IMPLS)
    cfg = RunConfig(op="allreduce", impls=tuple(i.name for i in impls), sizes=tuple(size_list), dtype=dtype,
                    redop=redop, in_place=in_place, chunk_bytes=chunk_bytes, policy=policy)

    def body(world):
        for impl in impls:
            impl.prepare(world)
        reporter = _reporter(world, cfg, output, len(impls) * len(size_list))
        if reporter:
            for n in notes:
                reporter.note(n)
        return _sweep(reporter, lambda: run_allreduce(world, cfg, impls, reporter), world)

    _run(nranks, output, body)


@cli.command()
@click.option("--sizes", "-s", default="1-4M", show_default=True, help="Message sizes in bytes (as for allreduce).")
@click.option("--pairs", default="0:1", show_default=True, help="Rank pairs: 0:1, a list 0:1,0:2, or 'all'.")
@click.option("--window", type=click.IntRange(min=1), default=64, show_default=True,
              help="Messages in flight per bandwidth iteration.")
@_policy_options
def p2p(sizes, pairs, window, nranks, output, policy) -> None:
    """Point-to-point ping-pong latency and windowed bandwidth between rank pairs (MPI)."""
    from .sweep import RunConfig, resolve_pairs, run_p2p
    size_list = parse_sizes(sizes)

    def body(world):
        cfg = RunConfig(op="p2p", impls=("mpi",), sizes=tuple(size_list), dtype="uint8", redop="none",
                        window=window, pairs=resolve_pairs(pairs, world.size), policy=policy)
        world.require_mpi("commbench p2p")
        reporter = _reporter(world, cfg, output, 2 * len(cfg.pairs) * len(size_list))
        return _sweep(reporter, lambda: run_p2p(world, cfg, reporter), world)

    _run(nranks, output, body)


def _reporter(world, cfg, output, steps):
    """The Reporter on rank 0, None elsewhere. The result file is created (or refused) before any
    measurement starts."""
    from . import _host
    from .reporter import Reporter, run_metadata
    error = None
    reporter = None
    if world.rank == 0:
        try:
            reporter = Reporter(run_metadata(world, cfg.describe(), sys.argv), output, steps,
                                _host.clock_floor())
        except CommbenchError as e:
            error = str(e)
    error = world.bcast(error)
    if error:
        raise CommbenchError(error)
    if reporter and world.local_size > reporter.meta["machine"]["cores"]:
        reporter.warn(f"{world.local_size} ranks share {reporter.meta['machine']['cores']} cores on "
                      f"{world.hosts[0]}: ranks compete for CPU and times inflate; remedy: use at most one "
                      f"rank per core (--np)")
    return reporter


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
            reporter.finish(f"{type(e).__name__}: {e}")
            click.echo(f"commbench: error: {type(e).__name__}: {e} (measured rows kept in "
                       f"{reporter.file.path})", err=True)
        if world.comm is not None and world.size > 1:
            world.comm.Abort(1)
        sys.exit(1)
    if reporter:
        reporter.finish()
    return wrong


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
        click.echo(f"MPI: {machine.mpi_version() or 'not available'}")
        click.echo(f"torch: {torch.__version__}")


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
        if _is_rank_zero():
            click.echo(f"commbench: error: {e}", err=True)
        sys.exit(e.exit_code)


def _is_rank_zero() -> bool:
    for var in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID", "RANK"):
        if var in os.environ:
            return os.environ[var] == "0"
    return True
