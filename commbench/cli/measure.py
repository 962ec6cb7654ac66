"""Commands that measure: collectives between ranks, point-to-point, local GPU copies."""

from __future__ import annotations

import os
import sys

import click

from ..collectives.dtypes import DTYPES, REDOPS, itemsize_of, redop_code
from ..collectives.impls import COPY_IMPL
from ..errors import CommbenchError
from ..launch import watchdog
from ..launch.world import detect_launcher
from ..results import nccl_knobs
from ..results.nccl_knobs import KNOBS
from ..run import preflight
from ..run.config import PLACES
from ..run.copies import ACCESS
from ..sizes import parse_size, parse_sizes, round_to_itemsize
from ..transports import TRANSPORTS, default_p2p_transport, nccl_choices, transport_names
from ..transports.nccl import NCCL, log_connections
from .common import (
    MAX_AGG,
    MAX_WINDOW,
    attach_nccl_log,
    measure_fabric,
    open_output,
    policy_options,
    ranks_option,
    resolve_device,
    run_ranks,
    sweep,
    timeout_option,
    timing_options,
    verdict_options,
)
from .group import cli


def names_or_all(text: str, known: dict, check) -> list[str]:
    """`all`, or a comma list whose every name `check` accepts."""
    names = list(known) if text.strip() == "all" else [t.strip() for t in text.split(",")]
    for name in names:
        check(name)
    return list(dict.fromkeys(names))


def _impl_help(coll) -> str:
    from ..transports import default_impls, impls_for
    under_torchrun = default_impls(coll, "cpu", "torchrun")
    return "Comma list of algorithm@transport (our algorithm over the transport) or a transport alone (its " \
        "library's call); a bare algorithm runs over its device's transport. " + "; ".join(
        f"{device.upper() if device == 'cpu' else 'GPU'}: {', '.join(impls_for(coll, device))} "
        f"(default {','.join(default_impls(coll, device, None))})" for device in ("cpu", "cuda")) + \
        (f"; {','.join(under_torchrun)} alone under torchrun" if under_torchrun != default_impls(coll, "cpu", None)
         else "") + "."


DEFAULT_SIZES = "1K-1G"


def nccl_variants_of(knobs: dict, impls) -> list[dict]:
    """The --nccl-* options (field -> text, results/nccl_knobs.py) as the variants of NCCL's call they
    ask for, refused in one line where NCCL's call is not among the impls or the environment forces
    NCCL's choice already (then the impl nccl would not be NCCL's own choice)."""
    variants = nccl_knobs.variants({k.field: k.parse(knobs.get(k.field)) for k in KNOBS})
    if not variants:
        return []
    option = next(k.option for k in KNOBS if knobs.get(k.field) is not None)
    if not any(i.transport is NCCL and i.algorithm is None for i in impls):
        raise CommbenchError(f"{option} forces the choice of NCCL's own call, impl nccl, which this run does not "
                             f"measure (impls: {', '.join(i.name for i in impls)}); add nccl to --impl, on GPUs")
    for k in KNOBS:
        if os.environ.get(k.env):
            raise CommbenchError(f"{k.env}={os.environ[k.env]} is set: impl nccl would not be NCCL's own choice beside the "
                                 f"forced ones of {option}; unset {k.env}")
    return variants


def sweep_sizes(sizes, min_bytes, max_bytes, step_factor, check) -> str:
    """The sweep as --sizes gives it, or as nccl-tests' -b, -e and -f spell it (smallest, largest, factor);
    -c 1 (nccl-tests' check) is what commbench always does."""
    if check == 0:
        raise CommbenchError("-c 0: commbench checks every size, untimed, before it times it; nothing to turn off")
    if (min_bytes, max_bytes, step_factor) == (None, None, None):
        return DEFAULT_SIZES if sizes is None else sizes  # '' is refused as an empty sweep, not the default
    if sizes is not None:
        raise CommbenchError("--sizes and nccl-tests' -b/-e/-f describe the same sweep: give one of them")
    if min_bytes is None or max_bytes is None:
        raise CommbenchError("-b and -e go together: the smallest and the largest size (-f, the factor, is 2 unless given)")
    for flag, text in (("-b", min_bytes), ("-e", max_bytes)):
        parse_size(text, flag)
    return f"{min_bytes}-{max_bytes}:x{step_factor or 2}"


def collective_command(coll, overlap: bool = False) -> click.Command:
    """The command that times `coll`: its options follow from the registry entry (--op for
    reductions, --root for rooted collectives, --place where it has an in-place form, --chunk
    where one of our algorithms pipelines). `overlap`: `overlap <collective>`, the library's
    non-blocking call beside a computation (run/overlap.py), with --compute and --probes and without
    what times several calls as one (--graph, --agg, --timing loop) or holds a rank back (--delay)."""

    def run(sizes, min_bytes, max_bytes, step_factor, check, impl_text, device, dtype, nranks, timeout_s, output,
            policy, no_fit, judge, graph=False, agg=1, buffers="commbench", delay=None, redop="none", root=0,
            place="out", chunk="1M", compute=None, probes=0, **knobs) -> None:
        from ..analysis.stragglers import delay_text, parse_delay
        from ..run.config import RunConfig
        from ..transports import default_impls, gpu_only, nccl_variants, parse_impls
        if overlap and policy.timing == "loop":
            raise CommbenchError("overlap times one call at a time, beside the computation: it needs --timing per-iteration")
        if policy.timing == "loop" and delay is not None:
            raise CommbenchError("--delay holds a rank back before each timed iteration: it needs --timing per-iteration")
        dtypes = names_or_all(dtype, DTYPES, itemsize_of)
        redops = names_or_all(redop, REDOPS, redop_code) if coll.reduces else ["none"]
        itemsize = max(itemsize_of(d) for d in dtypes)
        size_list = parse_sizes(sweep_sizes(sizes, min_bytes, max_bytes, step_factor, check))
        notes = [n for d in dtypes for n in round_to_itemsize(size_list, itemsize_of(d), d)[1]]
        chunk_bytes = parse_size(chunk, "--chunk")
        if chunk_bytes < itemsize:
            raise CommbenchError(f"--chunk {chunk} is smaller than one {dtypes[0]} element")
        device, gpus = resolve_device(device, impl_text, impl_text is not None and gpu_only(impl_text, coll))
        if graph and device != "cuda":
            raise CommbenchError("--graph replays CUDA graphs: it needs --device cuda")
        if overlap:
            from ..run.overlap import Compute, default_compute
            impls = _overlapping(coll, device, impl_text)  # first: the device may have none yet
            work = Compute.parse(default_compute(device) if compute is None else compute, device)
        else:
            impls = parse_impls(",".join(default_impls(coll, device, detect_launcher())) if impl_text is None else impl_text,
                                coll, device)
        variants = nccl_variants_of(knobs, impls)
        uncaptured = [i.name for i in impls if graph and not i.transport.captures_graphs]
        if uncaptured:
            raise CommbenchError(f"--graph captures NCCL's calls and commbench's algorithms over NCCL; --impl "
                                 f"{uncaptured[0]} cannot be captured in a CUDA graph")
        if buffers == "cupy":
            from ..run import cupy_buffers
            cupy_buffers.check_request([i.name for i in impls], device, dtypes)
            cupy_buffers.require_cupy()
        cfg = RunConfig(op=coll.name, impls=tuple(i.name for i in impls), sizes=tuple(size_list), buffers=buffers,
                        dtype=",".join(dtypes), redop=",".join(redops), place=place, device=device, graph=graph,
                        chunk_bytes=chunk_bytes, root=root, agg=agg, timeout_s=timeout_s, delay=parse_delay(delay, timeout_s),
                        policy=policy, nccl_variants=tuple(variants))
        if cfg.delay:
            notes.append(delay_text(cfg.describe()["delay"], agg))

        impls += nccl_variants(variants)
        steps = len(dtypes) * len(redops) * len(impls) * len(size_list) * len(cfg.placements)

        def body(world):
            from ..run.collective import run_collective  # torch: on the ranks alone
            # Each forced variant's communicator splits from the world's, which stays for them.
            world.subsets = world.subsets or bool(variants)
            config = {"overlap": {**work.describe(), "probes": probes}} if overlap else None
            # overlap's times are no collective's alone: no fit through its cost model, nothing judged.
            reporter = open_output(world, cfg, output, steps, None if overlap else judge, config=config,
                                   fit=not (no_fit or overlap))
            measure_fabric(world, reporter, None if overlap else judge)
            watchdog.start(world, cfg.timeout_s, reporter)
            if reporter:
                for n in notes:
                    reporter.note(n)

            def run():
                if overlap:
                    from ..run.overlap import run_overlap
                    for impl in impls:
                        impl.prepare(world, cfg)
                    return run_overlap(world, cfg, coll, impls, work, probes, reporter)
                # Inside the sweep: a NCCL initialisation that a dead peer stops fails like any size.
                if any(i.transport is NCCL for i in impls):
                    log_connections()
                    unrecorded = nccl_choices.record()
                    if reporter and unrecorded:
                        reporter.note(unrecorded)
                for impl in impls:
                    impl.prepare(world, cfg)
                wrong = run_collective(world, cfg, coll, impls, reporter)
                if any(i.transport is NCCL for i in impls):
                    attach_nccl_log(world, reporter)
                missing = nccl_choices.unreported() if coll.nccl_function and any(
                    i.transport is NCCL and i.algorithm is None for i in impls) else None
                if reporter and missing:
                    reporter.warn(missing)
                return wrong
            return sweep(reporter, run, world)

        run_ranks(nranks, gpus if device == "cuda" else 2, body, preflight.for_collective(coll, cfg, output), timeout_s,
                  measurements=lambda ranks: steps, policy=policy)

    options = [
        click.option("--sizes", "-s", default=None,
                     help=f"Sizes in bytes: 1K-1G (doubling), 8-256M:x4, 1M-8M:+1M, 8,1K,1M.  [default: {DEFAULT_SIZES}]"),
        click.option("--min-bytes", "-b", default=None, help="nccl-tests' spelling of the sweep: the smallest size (with -e)."),
        click.option("--max-bytes", "-e", default=None, help="nccl-tests' spelling of the sweep: the largest size (with -b)."),
        click.option("--step-factor", "-f", type=click.IntRange(min=2), default=None,
                     help="nccl-tests' spelling of the sweep: the factor between sizes (default 2)."),
        click.option("--check", "-c", type=click.IntRange(0, 1), default=None,
                     help="nccl-tests' -c: 1 (every size is checked, always); 0 is refused."),
        click.option("--impl", "impl_text", default=None,
                     help=_overlap_impl_help(coll) if overlap else _impl_help(coll)),
        click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
                     help="Where the buffers live; auto = cuda when a GPU is visible."),
        click.option("--dtype", "-d", default="float32", show_default=True,
                     help=f"One of {', '.join(DTYPES)}, a comma list, or all."),
    ]
    if overlap:
        from ..run.overlap import COMPUTE
        options += [
            click.option("--compute", default=None, metavar="KIND[:SIZE]",
                         help="The computation beside the collective: " + "; ".join(
                             f"{kind} ({where}): {what}" for kind, (where, what) in COMPUTE.items()) +
                         ". Default: the device's first."),
            click.option("--probes", type=click.IntRange(min=0, max=MAX_PROBES), default=0, show_default=True,
                         help="Tests of the collective (MPI_Testall) spread through the computation, as OSU's "
                              "--num_probes: 0 tests nothing until the wait, where a library without a progress "
                              "thread may move no data."),
        ]
    else:
        options += [
            click.option("--graph", is_flag=True, help="GPU: replay each iteration from a CUDA graph (small messages)."),
            click.option("--buffers", type=click.Choice(["commbench", "cupy"]), default="commbench", show_default=True,
                         help="Who allocates the GPU buffers of --impl mpi: commbench itself, or CuPy (as Python HPC "
                              "codes hand them to CUDA-aware MPI)."),
            click.option("--agg", "-m", type=click.IntRange(min=1, max=MAX_AGG), default=1, show_default=True,
                         help="Calls per timed iteration (nccl-tests' -m): NCCL's calls in one group, the others one "
                              "after another; times are per call."),
            click.option("--delay", default=None, metavar="RANK:US",
                         help="Rank RANK busy-waits US microseconds before each timed iteration (not the check), "
                              "to show what one slow rank costs the others: their time grows by about US."),
            # --nccl-algo, --nccl-proto, ...: the run's knobs (nccl_knobs.Knob.parse), taken by run(**knobs)
            *(click.option(k.option, k.field, default=None, metavar="LIST", help=k.help) for k in KNOBS),
        ]
    if coll.reduces:
        options.append(click.option("--op", "redop", default="sum", show_default=True,
                                    help=f"Reduction: {', '.join(REDOPS)}, a comma list, or all."))
    if coll.rooted:
        options.append(click.option("--root", type=click.IntRange(min=0), default=0, show_default=True,
                                    help="The rank the data comes from or goes to."))
    if coll.in_place:
        options.append(click.option("--place", type=click.Choice(list(PLACES)), default="out", show_default=True,
                                    help="Where the result goes: out of place (its own buffer), in place (one "
                                         "buffer, as nccl-tests places it), or both: each size out of place and "
                                         "in place, side by side in one row as nccl-tests prints them."))
    if coll.pipelined and not overlap:
        options.append(click.option("--chunk", default="1M", show_default=True, help="Tree pipeline chunk size in bytes."))
    no_fit = click.option("--no-fit", is_flag=True, help="Do not print the latency/bandwidth fit after the table.")
    command = run
    for decorate in (verdict_options, no_fit, timeout_option, ranks_option, timing_options, policy_options,
                     *reversed(options)):
        command = decorate(command)
    summary = (f"{coll.title} beside a computation: the library's non-blocking call and the computation, each "
               f"alone and both at once; how much of the collective the computation hid (OSU's overlap) and "
               f"how much each slowed the other.") if overlap else coll.summary
    return click.command(coll.name, help=summary)(command)


# OSU's --num_probes has no bound; a test costs about a microsecond, and a million of them in one
# computation would be the computation.
MAX_PROBES = 100_000


def _overlapping(coll, device: str, impl_text):
    """The impls `overlap` measures: the library calls that have a non-blocking form (Transport.overlaps),
    all of them by default; one typed that has none is refused in one line."""
    from ..transports import parse_impls
    known = _overlap_impls(coll, device)
    if not known:
        raise CommbenchError(f"overlap {coll.name} --device {device}: no library call with a non-blocking form "
                             f"is measured there yet; --device cpu measures MPI's")
    impls = parse_impls(",".join(known) if impl_text is None else impl_text, coll, device)
    for impl in impls:
        if impl.name not in known:
            raise CommbenchError(f"overlap measures a library's non-blocking call beside the computation: --impl "
                                 f"{impl.name} has none; choose from {', '.join(known)}")
    return impls


def _overlap_impls(coll, device: str) -> list[str]:
    """The library calls with a non-blocking form on `device`: host buffers alone so far (on GPUs the
    computation beside NCCL's call is a GEMM or a triad on a stream of its own, not measured yet)."""
    from ..transports import impls_for
    if device != "cpu":
        return []
    return [n for n, i in impls_for(coll, device).items() if i.algorithm is None and i.transport.overlaps]


def _overlap_impl_help(coll) -> str:
    return "Comma list of the library calls with a non-blocking form: " + "; ".join(
        f"{'CPU' if device == 'cpu' else 'GPU'}: {', '.join(_overlap_impls(coll, device)) or 'none yet'}"
        for device in ("cpu", "cuda")) + " (default: all)."


def _register_collectives() -> None:
    from ..collectives import all_collectives

    @cli.group(cls=type(cli))  # the collectives' other spellings too (all_gather, ...)
    def overlap():
        """A collective beside a computation, on every rank: each timed alone and both at once, both
        results checked; per size the overlap OSU's non-blocking collectives report and each side's
        slowdown (docs/commands/overlap.md)."""

    for coll in all_collectives():
        cli.add_command(collective_command(coll))
        overlap.add_command(collective_command(coll, overlap=True))


_register_collectives()


@cli.command()
@click.option("--sizes", "-s", default="1-4M", show_default=True, help="Message sizes in bytes (as for allreduce).")
@click.option("--impl", type=click.Choice(transport_names()), default=None,
              help="Transport between ranks: " + "; ".join(f"{t.name} ({t.p2p_summary})" for t in TRANSPORTS) + ".")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="cuda with --impl mpi: the peer-to-peer matrix of this process's GPUs (no ranks).")
@click.option("--pairs", default="0:1", show_default=True,
              help="Rank pairs: 0:1, a list 0:1,0:2, or 'all'; the lower rank sends.")
@click.option("--window", type=click.IntRange(min=1, max=MAX_WINDOW), default=64, show_default=True,
              help="Messages in flight per bandwidth iteration.")
@click.option("--access", type=click.Choice(list(ACCESS)), default=None,
              help="--device cuda: which GPU issues each peer copy: the source, writing into its peer (default), "
                   "the destination, reading from its peer, or both matrices.")
@policy_options
@timing_options
@ranks_option
@timeout_option
@click.option("--no-fit", is_flag=True, help="Do not print the latency/bandwidth fit after the table.")
@verdict_options
def p2p(sizes, impl, device, pairs, window, access, nranks, timeout_s, output, policy, no_fit, judge) -> None:
    """Point-to-point latency and bandwidth: between rank pairs (MPI or NCCL), or between every pair
    of this process's GPUs (--device cuda)."""
    from ..run.config import RunConfig
    from ..run.preflight import resolve_pairs
    size_list = parse_sizes(sizes)
    gpu_transports = [t.name for t in TRANSPORTS if t.p2p_device == "cuda"]
    if device == "cuda" and impl is not None and impl not in gpu_transports:
        raise CommbenchError(f"p2p --impl {impl} moves host buffers; for GPUs use --impl {'/'.join(gpu_transports)} "
                             f"(between ranks) or --device cuda alone (this process's GPUs)")
    impl = impl or default_p2p_transport(detect_launcher())
    if access is not None and (device != "cuda" or impl in gpu_transports):
        raise CommbenchError(f"--access is for the peer matrix of this process's GPUs (p2p --device cuda); "
                             f"--impl {impl} sends between ranks")
    if impl in gpu_transports:
        device = "cuda"
        gpus = resolve_device("cuda", impl)[1]
    elif device == "cuda":
        if nranks is not None or detect_launcher() is not None:
            raise CommbenchError("p2p --device cuda measures this process's GPUs: run it once, without --np or a launcher")
        if policy.timing == "loop":
            raise CommbenchError("p2p --device cuda times each copy alone: --timing loop is for rank pairs")
        return _local_peer_matrix(size_list, output, policy, ACCESS[access or "write"])
    else:
        gpus = 0

    def body(world):
        from ..run.p2p import run_p2p  # torch: on the ranks alone
        cfg = RunConfig(op="p2p", impls=(impl,), sizes=tuple(size_list), dtype="uint8", redop="none",
                        device=device, window=window, pairs=resolve_pairs(pairs, world.size), timeout_s=timeout_s,
                        policy=policy)
        reporter = open_output(world, cfg, output, 2 * len(cfg.pairs) * len(size_list), judge, fit=not no_fit)
        measure_fabric(world, reporter, judge)
        watchdog.start(world, cfg.timeout_s, reporter)

        def run():
            if impl == NCCL.name:
                log_connections()
            wrong = run_p2p(world, cfg, reporter)
            if impl == NCCL.name:
                attach_nccl_log(world, reporter)
            return wrong
        return sweep(reporter, run, world)

    run_ranks(nranks, max(gpus, 2), body, preflight.for_p2p(size_list, pairs, device, output, impl, "commbench p2p"),
              timeout_s, measurements=lambda ranks: 2 * len(preflight.resolve_pairs(pairs, ranks)) * len(size_list), policy=policy)


def _local_peer_matrix(size_list, output, policy, modes) -> None:
    from ..launch.world import local_world
    from ..node.gpu import require_gpu
    from ..run.config import RunConfig
    from ..run.copies import print_matrices, run_peer_matrix
    gpus = require_gpu("commbench p2p --device cuda")
    cfg = RunConfig(op="p2p", impls=(COPY_IMPL,), sizes=tuple(size_list), dtype="uint8", redop="none",
                    device="cuda", policy=policy)
    world = local_world()
    reporter = open_output(world, cfg, output, 2 * len(modes) * gpus * gpus * len(size_list), devices=list(range(gpus)))
    watchdog.start(world, cfg.timeout_s, reporter)
    matrices = {}

    def run():
        found, wrong = run_peer_matrix(cfg, reporter, gpus, modes)
        matrices.update(found)
        return wrong

    wrong = sweep(reporter, run, world)
    print_matrices(matrices, gpus, click.echo)
    sys.exit(1 if wrong else 0)


# `copy --src all`: a GPU whose pinned host copies run below this fraction of the other GPUs' median is
# named (as links judges its pairs: the same default of 75 %).
COPY_SLOW_FRACTION = 0.75


@cli.command()
@click.option("--sizes", "-s", default="4K-256M:x4", show_default=True, help="Transfer sizes in bytes.")
@click.option("--src", default="0", show_default=True,
              help="Source GPU, or 'all': every visible GPU in turn, each beside the others (the GPU whose host "
                   "copies fall behind is named).")
@click.option("--dst", type=click.IntRange(min=0), default=None,
              help="Destination GPU of the staged and direct copies (default the next GPU after --src, or --src "
                   "itself with one GPU).")
@click.option("--staging-chunk", default="4M", show_default=True, help="Chunk of the host-staged pipeline.")
@policy_options
def copy(sizes, src, dst, staging_chunk, output, policy) -> None:
    """Host<->device copies (pinned, pageable) and GPU->host->GPU staging beside direct P2P."""
    from ..launch.world import local_world
    from ..node.affinity import near_gpu, placement_line
    from ..node.gpu import cuda_module, require_gpu
    from ..run.config import RunConfig
    from ..run.copies import per_gpu_summary, run_copies
    size_list = parse_sizes(sizes)
    chunk = parse_size(staging_chunk, "--staging-chunk")
    if chunk <= 0:
        raise CommbenchError("--staging-chunk must be positive")
    every = src.strip().lower() == "all"
    if not every and not src.strip().isdecimal():
        raise CommbenchError(f"--src {src!r}: give a GPU index (0, 1, ...) or 'all'")
    if every and dst is not None:
        raise CommbenchError("--dst goes with one --src; with --src all each GPU copies to the next")
    gpus = require_gpu("commbench copy")
    sources = list(range(gpus)) if every else [int(src)]
    # Each source's partner for the staged and direct copies: the next GPU, or itself alone.
    dsts = [(g + 1) % gpus if dst is None else dst for g in sources]
    for name, index in (("--src", sources[-1]), ("--dst", dsts[-1])):
        if index >= gpus:
            raise CommbenchError(f"{name} {index}: only {gpus} GPU(s) visible")
    cfg = RunConfig(op="copy", impls=(COPY_IMPL,), sizes=tuple(size_list),
                    dtype="uint8", redop="none", device="cuda", policy=policy)
    world = local_world()
    reporter = open_output(world, cfg, output, 6 * len(size_list) * len(sources), devices=sorted(set(sources) | set(dsts)))
    watchdog.start(world, cfg.timeout_s, reporter)
    placements: list[dict] = []

    def run() -> int:
        wrong = 0
        if len(sources) > 1:
            # Each GPU's context (and what the driver keeps in host memory for it) made on its own
            # CPUs, before another GPU's copies touch it as their peer.
            for g in sources:
                with near_gpu(g):
                    cuda_module().mem_get_info(g)
        for g, d in zip(sources, dsts):
            with near_gpu(g) as placement:  # every host buffer of this GPU's copies is allocated inside
                placements.append({"device": g, **placement})
                reporter.attach("host_memory", list(placements))
                line, warning = placement_line(g, placement)
                (reporter.warn if warning else reporter.note)(line)
                wrong += run_copies(cfg, reporter, g, d, chunk)
        if len(sources) > 1:
            summary = per_gpu_summary(reporter.records, COPY_SLOW_FRACTION)
            reporter.attach("host_copies", summary)
            for text in summary["table"]:
                click.echo(text)
            for finding in summary["findings"]:
                reporter.warn(finding["text"])
        return wrong

    sys.exit(1 if sweep(reporter, run, world) else 0)
