"""Commands that read result files: fit, compare, baselines, plots, reports, export and import."""

from __future__ import annotations

import sys

import click

from .. import collectives, formats
from ..errors import CommbenchError
from ..formats.options import printable
from .common import expectation, fit_lines_for, percent, verdict_options
from .group import cli


@cli.command()
@click.argument("run", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print fit records as JSON.")
@verdict_options
def fit(run, as_json, judge) -> None:
    """Fit latency (alpha) and bandwidth per (op, impl, ranks) of a result file, with verdicts."""
    import json

    from ..analysis.fit import require_usable
    from ..analysis.verdicts import fits_with_verdicts
    from ..results.document import load_document
    doc = load_document(run)
    require_usable(doc, run)
    if as_json:
        fits = fits_with_verdicts(doc["results"], expectation(judge, doc, run), judge["pass_pct"], judge["fail_pct"])
        click.echo(json.dumps(fits, indent=1))
        return
    for line in fit_lines_for(doc, judge, run):
        click.echo(line)


@cli.command()
def fabrics() -> None:
    """List the fabric catalog: expected bandwidth, typical alpha, source."""
    from ..analysis.fabrics import catalog
    for row in catalog().values():
        bw = "by the run" if row.get("measured") else f"{row['bandwidth_gbps']:g} GB/s"
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
    from ..analysis.baseline import DEFAULT_DIR, save
    click.echo(f"saved {save(run, name, directory or DEFAULT_DIR, keep_samples)}")


@cli.command()
@click.argument("base", type=click.Path(dir_okay=False))
@click.argument("run", type=click.Path(dir_okay=False))
@click.option("--tolerance-bw", default="10%", show_default=True, help="Allowed bandwidth drop.")
@click.option("--tolerance-lat", default="25%", show_default=True, help="Allowed latency rise.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option("--force", is_flag=True, help="Compare runs timed by different conventions (--timing), with a warning.")
def compare(base, run, tolerance_bw, tolerance_lat, as_json, force) -> None:
    """Compare RUN against BASE: exit 0 pass, 1 regression, 2 unusable input."""
    import json

    from ..analysis.compare import compare as do_compare
    from ..analysis.compare import compare_lines
    from ..results.document import load_document
    result = do_compare(load_document(base), load_document(run), percent(tolerance_bw, "--tolerance-bw"),
                        percent(tolerance_lat, "--tolerance-lat"), force)
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

    from matplotlib.backend_bases import FigureCanvasBase

    from ..analysis.fit import require_usable
    from ..formats.plot import plot as draw
    from ..results.atomic import new_file
    from ..results.document import load_document
    # matplotlib takes the image format from the extension, and appends one to a name without it.
    if os.path.splitext(output)[1].lower().lstrip(".") not in FigureCanvasBase.get_supported_filetypes():
        raise CommbenchError(f"-o {output}: name an image file, e.g. plot.png (or .svg, .pdf)")
    docs = [(os.path.basename(r), load_document(r)) for r in runs]
    bases = [(os.path.basename(b), load_document(b)) for b in baselines]
    if any("numerics" in doc for _, doc in docs + bases):
        if len(docs) + len(bases) > 1:
            raise CommbenchError("a numerics result (commbench numerics) is plotted alone: give one RUN and no --baseline")
        from ..formats.numerics import plot as draw_numerics
        render = lambda tmp: draw_numerics(docs[0][1], tmp)  # noqa: E731
    else:
        for (_, doc), path in zip(docs + bases, runs + baselines):
            require_usable(doc, path)
        render = lambda tmp: draw(docs, tmp, bases, expectation(judge, docs[0][1], runs[0]))  # noqa: E731
    with new_file(output, f"{output} already exists; choose another -o") as tmp:
        render(tmp)
    click.echo(f"wrote {output}")


@cli.command()
@click.argument("run", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(file_okay=False), help="Directory for the report.")
@verdict_options
def report(run, output, judge) -> None:
    """Markdown and HTML report of RUN: facts, plot, fit table and verdicts."""
    import os

    from ..analysis.fit import require_usable
    from ..results.atomic import new_files_in
    from ..results.document import load_document
    doc = load_document(run)
    if "numerics" not in doc:  # a numerics result has its own report (each format's render_numerics)
        require_usable(doc, run)
    with new_files_in(output, f"{output} already holds a report; choose another -o") as stage:
        written = write_report(run, doc, stage, expectation(judge, doc, run), judge["pass_pct"], judge["fail_pct"])
    for path in written:
        click.echo(f"wrote {os.path.join(output, os.path.basename(path))}")


@cli.command()
@click.argument("run", type=click.Path(dir_okay=False))
@click.option("--format", "format_name", type=click.Choice(formats.names()), default="csv", show_default=True,
              help="; ".join(f"{name}: {formats.get(name).SUMMARY}" for name in formats.names()) + ".")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="File to write, never overwritten (default: stdout, for the formats that are text).")
@click.option("--samples", is_flag=True, help="Keep every per-iteration sample (formats that can hold them).")
@verdict_options
def export(run, format_name, output, samples, judge) -> None:
    """Write the result file RUN in another format: a table, records, a report or a plot."""
    import os

    from ..results.atomic import check_new_file
    from ..results.document import load_document, write_new
    fmt = formats.get(format_name)
    if fmt.BINARY and not output:
        raise CommbenchError(f"--format {format_name} writes binary data, not text: give -o FILE")
    if samples and not fmt.SAMPLES:
        raise CommbenchError(f"--samples: --format {format_name} cannot hold raw samples; formats that can: "
                             f"{', '.join(n for n in formats.names() if formats.get(n).SAMPLES)}")
    exists = f"{output} already exists; choose another -o"
    if output:
        check_new_file(output, exists)  # before the work of rendering
    doc = load_document(run)
    if not doc["results"] and "numerics" not in doc:
        raise CommbenchError(f"{run} holds no records to export")
    options = formats.Options(source=printable(os.path.basename(run)), expected=expectation(judge, doc, run),
                              pass_pct=judge["pass_pct"], fail_pct=judge["fail_pct"], samples=samples)
    data = formats.render(format_name, doc, options)
    if output:
        write_new(output, data, exists)
        click.echo(f"wrote {output}")
    else:
        click.echo(data, nl=False)


@cli.command("import")
@click.argument("tool", type=click.Choice(["nccl-tests", "osu"]))
@click.argument("log", type=click.Path(dir_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Result file (default commbench-results/<stamp>_<host>_import-<tool>.json).")
@click.option("--op", "op", type=click.Choice(collectives.names()), default=None,
              help="nccl-tests: the collective, for a log that does not name its binary (<name>_perf).")
@click.option("--test", type=click.Choice(["latency", "bw", "allreduce"]), default=None,
              help="osu: which benchmark, when the log does not say.")
@click.option("--ranks", type=click.IntRange(min=1), default=None, help="osu_allreduce: ranks it ran on (default 2).")
def import_cmd(tool, log, output, op, test, ranks) -> None:
    """Turn nccl-tests or OSU output into a commbench result file."""
    from ..results.atomic import check_new_file
    from ..results.document import default_path, open_to_read, validate, write_new
    from ..results.importers import MAX_LOG, import_nccl_tests, import_osu
    path = output or default_path(f"import-{tool}")
    exists = f"{path} already exists; choose another -o"
    check_new_file(path, exists)
    try:
        # Undecodable bytes become U+FFFD: a binary file is then just not the tool's output.
        with open_to_read(log, f"{tool} log", MAX_LOG, encoding="utf-8") as f:
            imported = import_nccl_tests(f, log, op) if tool == "nccl-tests" else import_osu(f, log, test, ranks)
    except OSError as e:
        raise CommbenchError(f"cannot read {log}: {e.strerror}") from None
    validate(imported.doc, log)
    write_new(path, imported.doc, exists)
    for w in imported.warnings:
        click.echo(f"warning: {w}", err=True)
    click.echo(f"imported {len(imported.doc['results'])} records from {log} into {path}")


def write_report(run_path: str, doc: dict, out_dir: str, expected, pass_pct: float, fail_pct: float) -> list[str]:
    """The report folder: the plot, report.md and report.html beside it (new files only); returns
    their paths."""
    import os

    from ..formats.report import PLOT
    from ..results.document import write_new
    options = formats.Options(source=printable(os.path.basename(run_path)), expected=expected, pass_pct=pass_pct,
                              fail_pct=fail_pct, image=PLOT)
    written = []
    for name, fmt in ((PLOT, "png"), ("report.md", "markdown"), ("report.html", "html")):
        path = os.path.join(out_dir, name)
        write_new(path, formats.render(fmt, doc, options), f"{path} exists")
        written.append(path)
    return written
