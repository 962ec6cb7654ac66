"""What the ranks of commbench's own launch leave in its folder for the command that started them,
in a module of no imports: a rank marks itself from its first statement (commbench/__main__.py)."""

import contextlib
import os

# The variable that names the file rank 0 makes in the launch's folder once it runs: a launch that
# ended without it failed before any rank started, and mpirun's own account is all the user has.
STARTED_MARK = "COMMBENCH_STARTED_MARK"

# Each rank leaves `guarded.<its pid>` there once it holds SIGINT (from its first statement): the
# command passes a Ctrl-C on to those ranks, and SIGTERM to any still in the interpreter's own
# start-up, where SIGINT raised a KeyboardInterrupt out of site's import ("Fatal Python error:
# init_import_site"); and it knows that ranks ran where rank 0 made no mark and mpirun gave no account.
GUARDED_PREFIX = "guarded."


def mark_guarded() -> None:
    """This rank of commbench's own launch holds SIGINT now (a process of no launch: nothing)."""
    mark = os.environ.get(STARTED_MARK)
    if mark:
        with contextlib.suppress(OSError):
            open(os.path.join(os.path.dirname(mark), f"{GUARDED_PREFIX}{os.getpid()}"), "x").close()


def guarded_pids(mark: str) -> set:
    """The pids of the ranks of the launch of `mark` that hold SIGINT (mark_guarded)."""
    with contextlib.suppress(OSError):
        return {int(name[len(GUARDED_PREFIX):]) for name in os.listdir(os.path.dirname(mark))
                if name.startswith(GUARDED_PREFIX) and name[len(GUARDED_PREFIX):].isdecimal()}
    return set()
