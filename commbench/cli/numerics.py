"""`commbench numerics`: does the reduced answer depend on the rank count or the algorithm?"""

from __future__ import annotations

import sys
from typing import Optional

import click

from ..analysis.numerics import DATA, FORMATS
from ..collectives import get
from ..errors import CommbenchError
from ..launch import watchdog
from ..launch.world import detect_launcher
from ..run import preflight
from ..sizes import parse_size
from .common import MAX_SEED, attach_nccl_log, resolve_device, run_ranks, sweep, timeout_option
from .group import cli
from .measure import _impl_help, names_or_all
from .scale import parse_counts

# Without a launcher and without --ranks: enough ranks for two rank counts to compare.
DEFAULT_SPAWN = 4


def default_counts(launched: int) -> tuple[int, ...]:
    """Every power of two from 2 up to the launched ranks."""
    if launched < 2:
        raise CommbenchError("commbench numerics compares rank counts: launch at least 2 ranks (--np 2, "
                             "mpirun -n 2), or give --ranks 1")
    return tuple(2**k for k in range(1, launched.bit_length()))


def _float_dtype(name: str) -> None:
    if name not in FORMATS:
        raise CommbenchError(f"--dtype {name}: numerics compares float dtypes: choose from {', '.join(FORMATS)}, "
                             f"or all")


def _bytes_per_rank(count: int, asked: Optional[tuple[int, ...]]):
    """Host memory of a rank, rank 0's at most: every contribution in float64 and once more in a dtype
    for the reference, and a few vectors for the reference, the results and the figures."""
    return lambda ranks: (2 * (asked[-1] if asked else ranks) + 8) * count * 8


@cli.command()
@click.option("--ranks", "ranks_text", default=None,
              help="Rank counts to compare, each a subset of the launched ranks: 2,4,8 (default: every power "
                   "of two from 2 up to the launched ranks).")
@click.option("--impl", "impl_text", default=None, help=_impl_help(get("allreduce")))
@click.option("--dtype", "-d", default="all", show_default=True,
              help=f"One of {', '.join(FORMATS)}, a comma list, or all.")
@click.option("--data", type=click.Choice(DATA), default="normal", show_default=True,
              help="normal: gradient-like, bucket scales over 3 orders of magnitude; uniform: in [-1, 1); "
                   "cancel: large values of opposite sign plus small ones; integer: exact in every dtype.")
@click.option("--count", "count_text", default="256K", show_default=True,
              help="Elements per vector: 4096, 64K, 1M.")
@click.option("--seed", type=click.IntRange(min=0, max=MAX_SEED), default=0, show_default=True, help="Seed of the data.")
@click.option("--repeats", type=click.IntRange(min=2, max=1_000_000), default=2, show_default=True,
              help="Calls per rank count, dtype and impl, compared bit for bit.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
              help="Where the vectors live; auto = cuda when a GPU is visible.")
@click.option("--np", "nranks", type=click.IntRange(min=1), default=None,
              help=f"Ranks to spawn when no launcher is present (default: the largest --ranks, else one per "
                   f"visible GPU with --device cuda, else {DEFAULT_SPAWN}).")
@timeout_option
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
              help="Result file (default commbench-results/<UTC stamp>-<pid>_<host>_numerics.json); never overwritten.")
def numerics(ranks_text, impl_text, dtype, data, count_text, seed, repeats, device, nranks, timeout_s, output) -> None:
    """Reduce the same seeded data over several rank counts with every all-reduce impl, and compare each
    result with the correctly rounded sum: errors, ulps, bitwise agreement across ranks, repeats and rank
    counts."""
    from ..collectives.dtypes import itemsize_of
    from ..node.machine import typed_command
    from ..run.config import RunConfig
    from ..run.reporter import run_metadata
    from ..transports import default_impls, gpu_only, over_mpi, parse_impls
    from ..transports.gloo import GLOO
    coll = get("allreduce")
    asked = tuple(parse_counts(ranks_text)) if ranks_text is not None else None
    dtypes = tuple(names_or_all(dtype, FORMATS, _float_dtype))
    try:
        count = parse_size(count_text)
    except CommbenchError:
        raise CommbenchError(f"--count {count_text!r}: give a number of elements such as 4096, 64K or 1M") from None
    if count < 1:
        raise CommbenchError(f"--count {count_text}: at least one element")
    device, gpus = resolve_device(device, impl_text, impl_text is not None and gpu_only(impl_text, coll))
    impls = parse_impls(",".join(default_impls(coll, device, detect_launcher())) if impl_text is None else impl_text,
                        coll, device)
    cfg = RunConfig(op=coll.name, impls=tuple(i.name for i in impls), sizes=(), dtype=",".join(dtypes), device=device,
                    timeout_s=timeout_s)

    config = {"op": coll.name, "impls": list(cfg.impls), "dtype": cfg.dtype, "redop": "sum", "place": "out",
              "device": device, "sizes": sorted({count * itemsize_of(d) for d in dtypes}),
              "policy": {}}  # nothing is timed

    def body(world):
        from ..run.numerics import NumericsOutput, Plan, rows  # on the ranks alone
        plan = Plan(data, seed, count, asked or default_counts(world.size), dtypes, repeats)
        world.subsets = True  # its rank counts
        if device == "cuda":  # each rank onto its GPU's CPUs before NCCL starts (node/affinity.py)
            from ..node.affinity import bind_rank
            bind_rank(world)
        nccl = any(i.transport.name == "nccl" for i in impls)
        if nccl:
            from ..transports.nccl import log_connections
            log_connections()
        for impl in impls:  # on every rank: refusals (an MPI impl under torchrun) before the result file
            impl.prepare(world, cfg)  # exists, and gloo's group before its subgroups
        made = []  # the output stays on rank 0; only the success travels
        world.root_call(lambda: made.append(NumericsOutput(run_metadata(world, config, typed_command(sys.argv)), plan,
                                                           output)))
        out = made[0] if made else None
        watchdog.start(world, cfg.timeout_s, out)

        def run() -> int:
            wrong = 0
            for got in rows(world, plan, impls, cfg):
                if out:
                    wrong += out.add(got[0])
            if nccl:
                attach_nccl_log(world, out)
            return world.bcast(wrong)
        return sweep(out, run, world)

    checks = preflight.Checks(output, f"numerics on {count} elements", _bytes_per_rank(count, asked), device,
                              ranks_used=asked[-1] if asked else None, needs_mpi=over_mpi(cfg.impls), lower="--count",
                              loads_torch=device == "cuda" or GLOO.name in cfg.impls)
    run_ranks(nranks, asked[-1] if asked else gpus if device == "cuda" else DEFAULT_SPAWN, body, checks, timeout_s)
