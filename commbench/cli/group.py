"""The command group every command module registers on. A process imports only the module of the
command it runs: the others cost every rank and top-level process about 60 ms of CPU (`import
commbench.cli` with every module 0.31 s, with measure's alone 0.25 s), in each of the hundreds of
processes a plan or a test run starts."""

import importlib

import click

from .. import __version__

# The commands of each module of commbench.cli but measure's (one per collective of the registry,
# p2p and copy), which takes every other name. `baseline` is analyze's group, and accept adds
# `baseline promote` to it. tests/test_layout.py checks this against what the modules register.
OTHER_COMMANDS = {
    "accept": ("accept", "baseline"),
    "analyze": ("fit", "fabrics", "compare", "plot", "report", "export", "import"),
    "fleet": ("fleet",),
    "links": ("links",),
    "node": ("topo", "doctor", "version"),
    "numerics": ("numerics",),
    "scale": ("scale",),
}
MODULES = ("measure", *OTHER_COMMANDS)
# The modules whose commands launch ranks and write a result file (-o): what an accept step runs,
# beside the node commands of accept/kinds.py. tests/test_layout.py holds them to their -o.
MEASURING = ("measure", "links", "numerics", "scale")


def module_of(name: str) -> str:
    """The module of commbench.cli that registers command `name` (measure for a name of no other)."""
    return next((module for module, names in OTHER_COMMANDS.items() if name in names), "measure")


def _load(module: str) -> None:
    importlib.import_module(f"{__package__}.{module}")


class _Group(click.Group):
    """Imports a command's module when the command is asked for; also answers to a collective's other
    spellings (nccl-tests' all_gather, reduce_scatter...)."""

    def get_command(self, ctx, name):
        _load(module_of(name))
        command = super().get_command(ctx, name)
        if command is None:
            from ..collectives import all_collectives
            for coll in all_collectives():
                if name in coll.aliases:
                    return super().get_command(ctx, coll.name)
        return command

    def list_commands(self, ctx):
        for module in MODULES:
            _load(module)
        return super().list_commands(ctx)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="commbench")
def cli() -> None:
    """Collective-communication microbenchmarks with exact checks and per-iteration statistics."""
