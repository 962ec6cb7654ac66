"""Commands that read result files: fit, compare, baselines, plots, reports, export and import."""

from __future__ import annotations

import sys

import click

from ..errors import CommbenchError
from .common import expectation, fit_lines_for, percent, verdict_options
from .group import cli


@cli.command()
@click.argument("run", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print fit records as JSON.")
@verdict_options
def fit(run, as_json, judge) -> None:
    """Fit latency (alpha) and bandwidth per (op, impl, ranks) of a result file, with verdicts."""
    import json

    from ..fitreport import fits_with_verdicts
    from ..results import load_document
    doc = load_document(run)
    if as_json:
        fits = fits_with_verdicts(doc["results"], expectation(judge, doc), judge["pass_pct"], judge["fail_pct"])
        click.echo(json.dumps(fits, indent=1))
        return
    for line in fit_lines_for(doc, judge):
        click.echo(line)


@cli.command()
def fabrics() -> None:
    """List the fabric catalog: expected bandwidth, typical alpha, source."""
    from ..fabrics import catalog
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
    from ..baseline import DEFAULT_DIR, save
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

    from ..compare import compare as do_compare
    from ..compare import compare_lines
    from ..results import load_document
    result = do_compare(load_document(base), load_document(run), percent(tolerance_bw, "--tolerance-bw"),
                        percent(tolerance_lat, "--tolerance-lat"))
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
@verdict_options
def plot(runs, output, baselines, judge) -> None:
    """Bus bandwidth and latency against size, with fits, expected line and baselines."""
    import os

    from ..plot import plot as draw
    from ..results import load_document
    if os.path.exists(output):
        raise CommbenchError(f"{output} already exists; choose another -o")
    docs = [(os.path.basename(r), load_document(r)) for r in runs]
    bases = [(os.path.basename(b), load_document(b)) for b in baselines]
    draw(docs, output, bases, expectation(judge, docs[0][1]))
    click.echo(f"wrote {output}")


@cli.command()
@click.argument("run", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(file_okay=False), help="Directory for the report.")
@verdict_options
def report(run, output, judge) -> None:
    """Markdown and HTML report of RUN: facts, plot, fit table and verdicts."""
    from ..report import write_report
    from ..results import load_document
    doc = load_document(run)
    for path in write_report(run, doc, output, expectation(judge, doc), judge["pass_pct"], judge["fail_pct"]):
        click.echo(f"wrote {path}")


@cli.command()
@click.argument("run", type=click.Path(dir_okay=False))
@click.option("--csv", "as_csv", is_flag=True, required=True, help="Comma-separated values, one row per (impl, size).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, help="File (default: stdout).")
def export(run, as_csv, output) -> None:
    """Export a result file's records (without raw samples)."""
    from ..results import load, write_new
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
    from ..importers import import_nccl_tests, import_osu
    from ..results import default_path, validate, write_new
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
