"""Command line: parse, choose, print. No measurement logic lives here. Commands are grouped by
concern: measure.py (collectives, p2p, copies), scale.py (rank counts), links.py (the bad link,
rank or host), accept.py (plans judged), numerics.py (rounding across rank counts), analyze.py (result files), fleet.py (many
nodes' result files), node.py (the node)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import NoReturn

import click

from .. import trace
from ..errors import CommbenchError, RankError, one_line
from ..launch import held, relay, watchdog
from ..launch.world import launch_rank, on_hang_up
from .group import cli  # each command's module registers it when it is asked for (group.py)

__all__ = ["cli", "main"]


def _error(text: str, own: bool = False) -> None:
    """`own`: this rank's problem alone (errors.RankError), said whatever the rank."""
    if own or launch_rank() in (None, 0):  # one line from the whole job, not one per rank
        with contextlib.suppress(OSError):  # a stderr that cannot take it (2>/dev/full) keeps the exit status
            click.echo(one_line(f"commbench: error: {text}"), err=True)


class Terminated(BaseException):
    """SIGTERM or a hang-up, raised where the process is, so that every `finally` runs (a half-written
    plot or report's temporary files go) before the process ends. A BaseException: no `except
    Exception` on the way may take it for a failure of its own."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _terminate(signum, frame) -> None:
    raise Terminated(signum)


def _leave(signum: int) -> NoReturn:
    """The command's exit on a signal, its `finally`s run: status 128 + the signal's number. A rank
    ends on the signal itself instead: its exit finalized MPI, which waits for the other ranks while
    they wait for it in a collective where no watchdog runs (the set-up, the end), both held for good
    and mpirun seeing no rank end (1 run in 3 of a SIGTERM to a rank 0.4-0.65 s in). The launch's
    account then names the signal."""
    if launch_rank() is None:
        sys.exit(128 + signum)
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
        sys.stderr.flush()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)  # not reached: the signal's default action ends the process


def main() -> None:
    """Every failure the user can cause or meet ends in one line on stderr, never a traceback:
    exit 2 for bad input (click's usage errors included) and for files that cannot be read or
    written. The measuring commands replace the SIGTERM handler with their own (the standalone
    parent passes it on to its ranks; a rank's watchdog reports it)."""
    watchdog.guard_start_up()
    signal.signal(signal.SIGTERM, _terminate)  # after the guard's, which holds only for the imports
    on_hang_up(_terminate)
    held.hold_import()  # a handler that raises must not raise inside torch's C++ as it loads
    try:  # from here on a SIGTERM is Terminated: what it meets before click's main too
        sys.stdout, sys.stderr = relay.std_streams(sys.stdout, sys.stderr)
        trace.launched()
        trace.phase("imports")  # the interpreter's start and commbench's command line, before any command runs
        cli.main(standalone_mode=False)
    except Terminated as e:
        if launch_rank() in (None, 0):
            with contextlib.suppress(OSError):  # a hang-up's terminal may be gone
                click.echo("commbench: terminated", err=True)
        _leave(e.signum)
    except click.exceptions.Abort:
        if launch_rank() in (None, 0):
            click.echo("commbench: aborted", err=True)
        _leave(signal.SIGINT)
    except click.exceptions.NoArgsIsHelpError as e:  # a group typed alone: its help, not an error line
        e.show()
        sys.exit(2)
    except click.ClickException as e:
        _error(e.format_message())
        sys.exit(2)
    except CommbenchError as e:
        _error(str(e), isinstance(e, RankError))
        sys.exit(e.exit_code)
    except OSError as e:  # a file the commands read or write, where no command gave its own answer
        _error(f"{e.filename}: {e.strerror}" if e.filename else e.strerror or str(e))
        sys.exit(2)
