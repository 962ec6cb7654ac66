"""The command line's entry: `commbench` (the console script) and `python -m commbench`, as the
standalone launch starts its ranks."""

import os
import signal
import sys

# A Ctrl-C, SIGTERM or hang-up before the start-up guard knows whether this process is a rank and
# which, is kept for the guard to act on: Python's own handler would end the process with a
# KeyboardInterrupt traceback from whichever import it hit, and a SIGTERM or a hang-up in the guard's
# own imports (a tenth of a second) ended the command a user typed without a word.
_early: list = []


def main() -> None:
    signal.signal(signal.SIGINT, lambda signum, frame: _early.append(signum))
    for ending in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(ending) is not signal.SIG_IGN:  # `nohup`'s stays
            signal.signal(ending, lambda signum, frame: _early.append(signum))
    from .launch.events import GUARDED, tell
    tell(GUARDED)  # a rank of commbench's own launch: a Ctrl-C is safe to pass on to it now
    try:
        from .launch.watchdog import guard_start_up
        guard_start_up(_early)  # before the imports that take a rank its first second
        # The command line's imports (a few tenths of a second): a Ctrl-C in them on the command a
        # user typed ends it as one in a command does.
        from .cli import main as command_line
        # The command line says a Ctrl-C's line itself once click runs; before that (its first
        # statements) one escaped as a KeyboardInterrupt traceback (1 run in 15 of a Ctrl-C 0.33 s in).
        command_line()
    except KeyboardInterrupt:
        os.write(2, b"commbench: aborted\n")
        sys.exit(130)
    finally:
        # Its work done and said, the process is deaf to the signals that end it in order: one in its
        # last milliseconds (the interpreter's exit handlers, a rank's MPI finalize) ended the command
        # without a word, or printed a traceback of an exit handler. Ignored, not defaulted: Python
        # leaves an ignored signal alone at its exit. A rank stuck in its finalize still meets the
        # launcher's SIGKILL (the standalone launch's after STOP_WITHIN_S, Open MPI's, Slurm's). A rank
        # of the standalone launch ignores its word that the command ended too: one SIGKILLed after the
        # last size ended a rank in its MPI finalize, and mpirun then ended rank 0 before it had
        # closed its file whole. (The module is loaded wherever a launch ran.)
        world = sys.modules.get("commbench.launch.world")
        for ending in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, *([world.LAUNCHER_GONE] if world else [])):
            signal.signal(ending, signal.SIG_IGN)


if __name__ == "__main__":
    main()
