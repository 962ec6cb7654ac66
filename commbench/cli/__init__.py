"""Command line: parse, choose, print. No measurement logic lives here. Commands are grouped by
concern: measure.py (collectives, p2p, copies), analyze.py (result files), node.py (the node)."""

from __future__ import annotations

import sys

import click

from ..errors import CommbenchError
from ..world import launch_rank
from . import analyze, measure, node  # noqa: F401  (each registers its commands on the group)
from .group import cli

__all__ = ["cli", "main"]


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
        if launch_rank() in (None, 0):  # one line from the whole job, not one per rank
            click.echo(f"commbench: error: {e}", err=True)
        sys.exit(e.exit_code)
