"""`commbench scale`: one collective at several rank counts under one launch, and whether adding
ranks pays for a data-parallel step (analysis/scaling.py)."""

from __future__ import annotations

import dataclasses
import json
from typing import Optional

import click

from ..collectives.dtypes import itemsize_of
from ..errors import CommbenchError
from ..launch import watchdog
from ..launch.world import detect_launcher
from ..results.atomic import check_new_file, one_file_each
from ..run import preflight
from ..sizes import format_size, parse_size, parse_sizes, round_to_itemsize
from .common import (
    Finite,
    attach_nccl_log,
    expectation,
    measure_fabric,
    open_output,
    policy_options,
    ranks_option,
    resolve_device,
    run_ranks,
    sweep,
    timeout_option,
    verdict_options,
)
from .group import cli

# More ranks than any machine runs (the largest have a few million cores): a count beyond is a slip.
MAX_COUNT = 1 << 24


def parse_counts(text: str, flag: str = "--ranks") -> list[int]:
    """The rank counts of a comma list given as `flag`."""
    counts = []
    for part in text.split(","):
        part = part.strip()
        # Its length first: int() refuses, in an error of its own, more than 4,300 digits.
        if not part.isdecimal() or len(part.lstrip("0")) > len(str(MAX_COUNT)) or not 1 <= int(part) <= MAX_COUNT:
            raise CommbenchError(f"bad count '{part[:24]}{'...' if len(part) > 24 else ''}' in {flag}: give positive "
                                 f"integers up to {MAX_COUNT:,}, e.g. 1,2,4,8")
        counts.append(int(part))
    return sorted(set(counts))


def _collective_names() -> list[str]:
    from ..collectives import names
    return names()


# More than any model's gradients (250 trillion float32 parameters): a size beyond is a typing slip.
MAX_GRAD_BYTES = 1 << 50


def _workload(compute_ms, grad_bytes, params, dtype, overlap, overlap_from, strong, largest: int, coll):
    """The step that scale judges; --overlap-from takes overlap and the compute's slowdown from an
    `overlap` result file, at the size nearest the gradients."""
    from ..analysis.scaling import Workload, measured_overlap
    if grad_bytes is not None and params is not None:
        raise CommbenchError("give --grad-bytes or --params, not both")
    size = params * itemsize_of(dtype) if params is not None else \
        parse_size(grad_bytes, "--grad-bytes") if grad_bytes is not None else largest
    if not 0 < size <= MAX_GRAD_BYTES:
        raise CommbenchError(f"the gradients must be 1 byte to {format_size(MAX_GRAD_BYTES)} (--grad-bytes, --params), "
                             f"not {size:,} bytes")
    if overlap_from is None:
        return Workload(compute_ms, size, overlap or 0.0, strong)
    if overlap is not None:
        raise CommbenchError("give --overlap (a guess) or --overlap-from (measured by 'commbench overlap'), not both")
    from ..results.document import load_document
    return Workload(compute_ms, size, strong=strong, **measured_overlap(load_document(overlap_from), coll, size, overlap_from))


@cli.command()
@click.option("--op", "op", type=click.Choice(_collective_names()), default="allreduce", show_default=True,
              help="The collective a step runs over its gradients.")
@click.option("--ranks", "counts_text", default="1,2,4,8", show_default=True,
              help="Rank counts to measure, each on the first ranks of one launch (sub-communicators).")
@click.option("--sizes", "-s", default="1K-256M:x4", show_default=True, help="Sizes in bytes, as for allreduce.")
@click.option("--impl", "impl_text", default=None, help="Comma list of impls, as for the collective's command.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--dtype", "-d", default="float32", show_default=True, help="Element type of buffers and gradients.")
@click.option("--compute-ms", type=Finite(min=0, min_open=True), default=100.0, show_default=True,
              help="One step's compute time on one rank.")
@click.option("--grad-bytes", default=None, help="Gradient bytes reduced each step (default: the largest size).")
@click.option("--params", type=click.IntRange(min=1), default=None, help="Or: parameters, in --dtype elements.")
@click.option("--overlap", type=Finite(0, 1), default=None,
              help="Share of the communication hidden behind compute (0-1), a guess; default 0.")
@click.option("--overlap-from", type=click.Path(dir_okay=False), default=None,
              help="Or: the share measured by 'commbench overlap' of this collective (its result file), at the size "
                   "nearest the gradients, with the compute's slowdown beside it.")
@click.option("--strong", is_flag=True, help="Fixed global batch: compute shrinks as 1/ranks (default: each rank keeps "
                                             "its batch, so throughput is ranks x batch per step).")
@click.option("--extrapolate", "extra_text", default="16,32,64,128,256,512,1024", show_default=True,
              help="Counts to predict beyond those measured, through the cost model.")
@click.option("--ranks-per-host", type=click.IntRange(min=1), default=None,
              help="For predictions with --fabric/--expect-gbps: counts above this leave one host (default: the "
                   "ranks per host of this launch).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="PNG of speedup against ranks: ideal line, measured points, predicted curve.")
@click.option("--from", "source", type=click.Path(dir_okay=False), default=None,
              help="Judge an earlier scale result file for this workload instead of measuring.")
@click.option("--json", "as_json", is_flag=True, help="With --from: print the analysis as JSON instead of the table.")
@policy_options
@ranks_option
@timeout_option
@verdict_options
def scale(op, counts_text, sizes, impl_text, device, dtype, compute_ms, grad_bytes, params, overlap, overlap_from,
          strong, extra_text, ranks_per_host, plot_path, source, as_json, nranks, timeout_s, output, policy, judge) -> None:
    """Does adding ranks pay? A collective at several rank counts (default 1, 2, 4, 8), its fit per
    count, and a data-parallel step (compute + the collective over the gradients) measured and
    predicted at each count and beyond."""
    from ..collectives import get
    from ..transports import default_impls, parse_impls
    coll = get(op)
    counts, extra = parse_counts(counts_text), parse_counts(extra_text, "--extrapolate")
    if as_json and source is None:
        raise CommbenchError("--json prints the analysis of --from RUN; a run keeps it in its result file ('scale')")
    itemsize_of(dtype)
    if plot_path is not None:
        if not plot_path.lower().endswith(".png"):
            raise CommbenchError(f"--plot {plot_path}: name a PNG file, e.g. scale.png (the plot is a PNG image)")
        check_new_file(plot_path, f"{plot_path} already exists; choose another --plot")
        one_file_each({"-o": output, "--plot": plot_path})
    if source is not None:
        from ..results.document import load_document
        doc = load_document(source)
        if doc["config"]["op"] != coll.name:
            raise CommbenchError(f"{source} measured {doc['config']['op']}, not {coll.name}: give --op {doc['config']['op']}")
        workload = _workload(compute_ms, grad_bytes, params, dtype, overlap, overlap_from, strong,
                             max(doc["config"]["sizes"]), coll)
        per_host = ranks_per_host or max(doc["machine"]["ranks"] // max(len(set(doc["machine"]["hosts"])), 1), 1)
        _show(_analyses(doc["results"], coll, doc["config"]["impls"], workload, extra,
                        expectation(judge, doc, source), per_host, doc["config"]), plot_path, as_json)
        return

    from ..run.config import RunConfig
    size_list = parse_sizes(sizes)
    round_to_itemsize(size_list, itemsize_of(dtype), dtype)  # refuses a size below one element
    workload = _workload(compute_ms, grad_bytes, params, dtype, overlap, overlap_from, strong, max(size_list), coll)
    device, gpus = resolve_device(device, impl_text)
    impls = parse_impls(",".join(default_impls(coll, device, detect_launcher())) if impl_text is None else impl_text,
                        coll, device)
    cfg = RunConfig(op=coll.name, impls=tuple(i.name for i in impls), sizes=tuple(size_list), dtype=dtype,
                    redop="sum" if coll.reduces else "none", device=device, timeout_s=timeout_s, policy=policy)
    checks = dataclasses.replace(preflight.for_collective(coll, cfg, output), ranks_used=max(counts))

    def body(world):
        from ..run.collective import run_counts  # torch: on the ranks alone
        from ..transports.nccl import log_connections
        world.subsets = True
        nccl = any(i.transport.name == "nccl" for i in impls)
        if nccl:
            log_connections()
        for impl in impls:
            impl.prepare(world, cfg)  # on every rank: gloo's group must exist before its subgroups
        reporter = open_output(world, cfg, output, len(counts) * len(impls) * len(size_list), judge,
                               config={"scale": {"ranks": counts, "workload": dataclasses.asdict(workload)}})
        measure_fabric(world, reporter, judge)
        watchdog.start(world, cfg.timeout_s, reporter)

        def run():
            wrong = run_counts(world, cfg, coll, impls, counts, reporter)
            if nccl:
                attach_nccl_log(world, reporter)
            # Judged on rank 0, which holds the rows; a refusal there reaches every rank.
            analyses = world.root_call(lambda: _analyses(reporter.records, coll, cfg.impls, workload, extra,
                                                         expectation(judge, reporter.file.doc),
                                                         ranks_per_host or world.local_size,
                                                         reporter.file.doc["config"]))
            if reporter:
                reporter.attach("scale", analyses)
            return wrong

        wrong = sweep(reporter, run, world)
        if reporter:
            _show(reporter.file.doc["scale"], plot_path, as_json)
        return wrong

    run_ranks(nranks, max(counts) if device == "cpu" else gpus, body, checks, timeout_s,
              measurements=lambda ranks: len(counts) * len(impls) * len(size_list), policy=policy)


def _analyses(records, coll, impls, workload, extra, fabric, per_host: Optional[int], config: dict) -> list[dict]:
    from ..analysis.scaling import analyse
    return [analyse(records, coll, impl, workload, extra, fabric, per_host, bool(config.get("shared_gpu")))
            for impl in impls]


def _show(analyses: list[dict], plot_path: Optional[str], as_json: bool) -> None:
    from ..analysis.scaling import lines, plot
    if as_json:
        click.echo(json.dumps(analyses, indent=1))
    else:
        for analysis in analyses:
            click.echo("#")
            for line in lines(analysis):
                click.echo(line)
    if plot_path is not None:
        from ..results.atomic import new_file
        with new_file(plot_path, f"{plot_path} already exists; choose another --plot") as tmp:
            plot(analyses, tmp)
        click.echo(f"# plot: {plot_path}")
