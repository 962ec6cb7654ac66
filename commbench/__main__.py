"""`python -m commbench`: the command line, as the standalone launch starts its ranks."""

import signal

# A Ctrl-C in the first tenth of a second, before the start-up guard knows whether this process is a
# rank and which, is kept for the guard to act on: Python's own handler would end the process with a
# KeyboardInterrupt traceback from whichever import it hit.
_early: list = []
signal.signal(signal.SIGINT, lambda signum, frame: _early.append(signum))

from .launch.watchdog import guard_start_up  # noqa: E402

guard_start_up(_early)  # before the imports that take a rank its first second

from .cli import main  # noqa: E402

main()
