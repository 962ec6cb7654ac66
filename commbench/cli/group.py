"""The command group every command module registers on."""

import click

from .. import __version__


class _Group(click.Group):
    """Also answers to a collective's other spellings (nccl-tests' all_gather, reduce_scatter...)."""

    def get_command(self, ctx, name):
        command = super().get_command(ctx, name)
        if command is None:
            from ..collectives import all_collectives
            for coll in all_collectives():
                if name in coll.aliases:
                    return super().get_command(ctx, coll.name)
        return command


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="commbench")
def cli() -> None:
    """Collective-communication microbenchmarks with exact checks and per-iteration statistics."""
