"""The standalone launch, supervised: the ranks run under the bundled mpirun (launch), their output
relayed (relay.py), the signals the command gets passed on to them, ranks stopped before their
watchdogs ended (backstop.py), and, once every one has ended, how the launch ended read into an Ending
and its last word said (ending.py's rules)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import click

from . import relay
from .backstop import STOP_WITHIN_S, Backstop, session_members
from .ending import Ending, said
from .events import EVENTS_VAR
from .events import read as read_events
from .world import dies_with, on_hang_up


def say(ending: Ending) -> None:
    """The standalone launch's one line once the ranks ended (launch/ending.py's rules), mpirun's
    account of a signalled rank before a line that names it."""
    preface, line = said(ending)
    if preface is not None:
        click.echo(preface, err=True, nl=False)
    if line is not None:
        click.echo(line, err=True)


# How often the command looks whether it was interrupted while it waits for the launch.
WAIT_STEP_S = 0.25


def _outlived(sid: int) -> None:
    """Ranks of mpirun's session that outlived it (a SIGKILLed mpirun orphans its ranks, ending none)
    waited for, then ended, STOP_WITHIN_S on: rank 0 may still be closing its file, which the last
    word reads (it said `still open` of a file rank 0 then closed). They end at their next line, their
    output closed (watchdog.output_closed)."""
    until = time.monotonic() + STOP_WITHIN_S
    while session_members(sid) and time.monotonic() < until:
        time.sleep(OUTLIVED_POLL_S)
    for pid in session_members(sid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# How often the command looks whether the ranks that outlived mpirun ended: they do within milliseconds.
OUTLIVED_POLL_S = 0.02


def _to_mpirun(signum: int) -> int:
    """What mpirun itself gets for a signal the command passes on: a hang-up as SIGTERM, which it
    ends its launch on in order."""
    return signal.SIGTERM if signum == signal.SIGHUP else signum


def launch(argv: list[str], env: dict, timeout_s: float) -> Ending:
    """Runs the ranks under mpirun and says how the launch ended; their stderr and mpirun's pass
    through launch/relay.py. SIGINT/SIGTERM go on to the ranks
    themselves (rank 0 then closes the result file and speaks, and mpirun ends the rest): a signalled
    mpirun would stop relaying the ranks' output. mpirun gets a session of its own so that whatever
    is left after STOP_WITHIN_S goes with it, and it ends with this process, even a SIGKILLed one."""
    read_end, write_end = os.pipe()
    # The ranks' stdout through this process too: a reader that left (`| head`) made mpirun end the
    # job on its SIGPIPE, a complete run's exit status 1.
    out_read, out_write = os.pipe()
    sys.stdout.flush()
    interrupted: list = []
    running: list = []  # mpirun, once started

    def forward(signum, _frame):
        # A hang-up (the terminal or the ssh session closed) ends the ranks as SIGTERM does, in
        # order, the file closed, and says it was a hang-up; mpirun of no ranks yet takes SIGTERM.
        interrupted.append(signum)
        if not running:
            return  # passed on to mpirun as soon as it runs
        proc = running[0]
        ranks = session_members(proc.pid)
        # A Ctrl-C to the ranks that hold it; SIGTERM ends one still in the interpreter's start-up
        # without a word (events.GUARDED).
        guarded = read_events(env[EVENTS_VAR]).guarded if signum == signal.SIGINT else set(ranks)
        for pid in ranks or [proc.pid]:  # no ranks yet: mpirun ends its launch
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum if pid in guarded else _to_mpirun(signum) if not ranks else signal.SIGTERM)

    # Set before mpirun starts: a signal that came as it started raised out of here, and the launch
    # folder, removed, was made again by the starting ranks' marks (6 runs in 8 of a hang-up then).
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, forward)
    on_hang_up(forward)
    # SIGPIPE stays ignored in mpirun (restore_signals=False): once this process is SIGKILLed, its
    # pipe is broken, and mpirun, killed by the first line it wrote there, would leave its ranks
    # without the SIGTERM that ends them in order (dies_with).
    proc = subprocess.Popen(argv, env=env, stdout=out_write, stderr=write_end, start_new_session=True,
                            restore_signals=False, preexec_fn=dies_with(os.getpid()))
    running.append(proc)
    if interrupted:  # no ranks yet: mpirun ends its launch
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, _to_mpirun(interrupted[0]))
    os.close(write_end)
    os.close(out_write)
    relayed = relay.start(read_end, sys.stderr.buffer)
    passed = relay.pass_on(out_read, sys.stdout.buffer)
    backstop = Backstop(proc.pid, timeout_s, relayed, lambda: bool(interrupted))
    backstop.start()
    # Waited for in short steps: a signal's handler returns into the wait it came in, and an untimed
    # wait then went on past STOP_WITHIN_S for ranks deaf to the signal (held in a C call as they
    # started), for good.
    killed_at = None
    while True:
        try:
            rc = proc.wait(timeout=WAIT_STEP_S)
            break
        except subprocess.TimeoutExpired:
            if interrupted and killed_at is None:
                killed_at = time.monotonic() + STOP_WITHIN_S
            if killed_at is not None and time.monotonic() >= killed_at:
                # Every process of mpirun's session: Open MPI puts each rank in a group of its own.
                for pid in session_members(proc.pid) or [proc.pid]:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                killed_at += STOP_WITHIN_S
    _outlived(proc.pid)
    backstop.stop()
    relayed.join(STOP_WITHIN_S)  # what mpirun wrote last, on the user's stderr before the exit
    passed.join(STOP_WITHIN_S)
    # A rank killed by a signal makes mpirun's own status a signal number; the command's is 1.
    told = read_events(env[EVENTS_VAR])
    status = told.launched_status(rc)
    return Ending(status if status in (0, 1, 2) and not (interrupted and status == 0) else 1, relayed.ending,
                  backstop.text() if backstop.ended else None, interrupted[0] if interrupted else None,
                  told.started, bool(told.guarded), told.spoken, relay.signalled_rank(relayed.seen), told.result,
                  relay.withheld_account(relayed.withheld), rc)
