"""The command group every command module registers on."""

import click

from .. import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="commbench")
def cli() -> None:
    """Collective-communication microbenchmarks with exact checks and per-iteration statistics."""
