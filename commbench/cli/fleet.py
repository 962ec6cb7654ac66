"""`commbench fleet`: many nodes' result files, the nodes that stand apart from their SKU named
(analysis/fleet.py)."""

from __future__ import annotations

import json
import os
import sys

import click

from ..errors import CommbenchError
from .common import Finite
from .group import cli


def result_paths(paths: tuple[str, ...]) -> list[str]:
    """The files given and the .json files under the folders given (recursively), in order."""
    found = []
    for path in paths:
        if os.path.isdir(path):
            for folder, dirs, files in os.walk(path):
                dirs.sort()
                found += [os.path.join(folder, f) for f in sorted(files) if f.endswith(".json")]
        elif os.path.isfile(path):
            found.append(path)
        else:
            raise CommbenchError(f"{path}: no such file or folder")
    return list(dict.fromkeys(found))


@cli.command()
@click.argument("results", nargs=-1, required=True)
@click.option("--z", "threshold", type=Finite(min=0, min_open=True), default=3.5, show_default=True,
              help="A node is an outlier where its modified z-score among the nodes of its SKU passes this.")
@click.option("--json", "as_json", is_flag=True, help="Print the whole analysis (nodes, figures, SKUs, outliers) as JSON.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="Write a heat map (PNG) of the largest SKU's nodes x metrics, outliers marked.")
def fleet(results, threshold, as_json, plot_path) -> None:
    """Set many nodes' results (files or folders of them) side by side: each node's headline figures
    against the other nodes of its SKU, the ones that stand apart named, farthest first. Exit 1 when
    a node is worse than its fleet or a host-level links run FAILed a host."""
    from ..analysis.fleet import analyse, failed_hosts, lines, plot
    from ..results.atomic import check_new_file, new_file
    from ..results.document import load_document
    if plot_path is not None:
        check_new_file(plot_path, f"{plot_path} already exists; choose another --plot")
    docs, skipped = [], []
    for path in result_paths(results):
        try:
            docs.append((path, load_document(path)))
        except CommbenchError as e:  # a fleet's folder holds other files too: say so, go on
            skipped.append(str(e))
    if not docs:  # one line: the reason itself where there was one file, else how many and one of them
        raise CommbenchError(skipped[0] if len(skipped) == 1 else
                             f"no result files among {', '.join(results)}" +
                             (f" ({len(skipped)} file(s) that are not, e.g. {skipped[0]})" if skipped else ""))
    if skipped:
        click.echo(f"warning: skipped {len(skipped)} file(s) that are not result files, e.g. {skipped[0]}", err=True)
    found = analyse(docs, threshold)
    if not found["nodes"]:
        raise CommbenchError("none of the result files gives a node's own figures (a run on one host, or a "
                             "links run's hosts)")
    if as_json:
        click.echo(json.dumps(found, indent=1))
    else:
        for line in lines(found):
            click.echo(line)
    if plot_path is not None:
        with new_file(plot_path, f"{plot_path} already exists; choose another --plot") as tmp:
            plot(found, tmp)
        if not as_json:
            click.echo(f"# plot: {plot_path}")
    sys.exit(1 if any(o["worse"] for o in found["outliers"]) or failed_hosts(found) else 0)
