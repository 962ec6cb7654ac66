"""Commands that measure: collectives between ranks, point-to-point, local GPU copies."""

from __future__ import annotations

import sys

import click

from ..errors import CommbenchError
from ..sizes import parse_size, parse_sizes, round_to_itemsize
from ..spec import DTYPES, REDOPS, dtype_of, redop_code
from ..world import detect_launcher
from .common import (make_reporter, policy_options, ranks_option, resolve_device, run_ranks, sweep, timeout_option,
                     verdict_options)
from .group import cli


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
@policy_options
@ranks_option
@timeout_option
@click.option("--no-fit", is_flag=True, help="Do not print the latency/bandwidth fit after the table.")
@verdict_options
def allreduce(sizes, impl_text, device, graph, dtype, redop, in_place, chunk, nranks, timeout_s, output, policy,
              no_fit, judge) -> None:
    """Time all-reduce implementations across message sizes."""
    from ..backends import DEFAULT_IMPLS, parse_impls
    from ..sweep import RunConfig, run_allreduce
    torch_dtype = dtype_of(dtype)
    redop_code(redop)
    itemsize = torch_dtype.itemsize
    size_list, notes = round_to_itemsize(parse_sizes(sizes), itemsize)
    chunk_bytes = parse_size(chunk)
    if chunk_bytes < itemsize:
        raise CommbenchError(f"--chunk {chunk} is smaller than one {dtype} element")
    device, gpus = resolve_device(device, impl_text)
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
        reporter = make_reporter(world, cfg, output, len(impls) * len(size_list), None if no_fit else judge)
        if reporter:
            for n in notes:
                reporter.note(n)
        return sweep(reporter, lambda: run_allreduce(world, cfg, impls, reporter), world)

    run_ranks(nranks, gpus if device == "cuda" else 2, body)


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
@policy_options
@ranks_option
@timeout_option
@click.option("--no-fit", is_flag=True, help="Do not print the latency/bandwidth fit after the table.")
@verdict_options
def p2p(sizes, impl, device, pairs, window, nranks, timeout_s, output, policy, no_fit, judge) -> None:
    """Point-to-point latency and bandwidth: between rank pairs (MPI or NCCL), or between every pair
    of this process's GPUs (--device cuda)."""
    from ..sweep import RunConfig, resolve_pairs, run_p2p
    size_list = parse_sizes(sizes)
    if device == "cuda" and impl in ("mpi", "gloo"):
        raise CommbenchError(f"p2p --impl {impl} moves host buffers; for GPUs use --impl nccl (between ranks) or "
                             f"--device cuda alone (this process's GPUs)")
    impl = impl or ("gloo" if detect_launcher() == "torchrun" and device == "cpu" else "mpi")
    if impl == "nccl":
        device = "cuda"
        gpus = resolve_device("cuda", "nccl")[1]
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
        reporter = make_reporter(world, cfg, output, 2 * len(cfg.pairs) * len(size_list), None if no_fit else judge)
        return sweep(reporter, lambda: run_p2p(world, cfg, reporter), world)

    run_ranks(nranks, max(gpus, 2), body)


def _local_peer_matrix(size_list, output, policy) -> None:
    from ..copies import print_matrices, run_peer_matrix
    from ..gpu import require_gpu
    from ..sweep import RunConfig
    from ..world import local_world
    gpus = require_gpu("commbench p2p --device cuda")
    cfg = RunConfig(op="p2p", impls=("ce", "sm"), sizes=tuple(size_list), dtype="uint8", redop="none",
                    device="cuda", policy=policy)
    world = local_world()
    reporter = make_reporter(world, cfg, output, 4 * gpus * gpus * len(size_list))
    matrices = {}

    def run():
        found, wrong = run_peer_matrix(cfg, reporter, gpus)
        matrices.update(found)
        return wrong

    wrong = sweep(reporter, run, world)
    print_matrices(matrices, gpus, click.echo)
    sys.exit(1 if wrong else 0)


@cli.command()
@click.option("--sizes", "-s", default="4K-256M:x4", show_default=True, help="Transfer sizes in bytes.")
@click.option("--src", type=click.IntRange(min=0), default=0, show_default=True, help="Source GPU.")
@click.option("--dst", type=click.IntRange(min=0), default=None,
              help="Destination GPU of the staged and direct copies (default 1, or 0 with one GPU).")
@click.option("--staging-chunk", default="4M", show_default=True, help="Chunk of the host-staged pipeline.")
@policy_options
def copy(sizes, src, dst, staging_chunk, output, policy) -> None:
    """Host<->device copies (pinned, pageable) and GPU->host->GPU staging beside direct P2P."""
    from ..copies import run_copies
    from ..gpu import require_gpu
    from ..sweep import RunConfig
    from ..world import local_world
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
    reporter = make_reporter(world, cfg, output, 6 * len(size_list))
    sys.exit(1 if sweep(reporter, lambda: run_copies(cfg, reporter, src, dst, chunk), world) else 0)
