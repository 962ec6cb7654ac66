"""What the ranks of commbench's own launch tell the command that started them: one event per line
(JSON) appended to one file in the launch's folder (world.session_base names it in EVENTS_VAR). The
command reads the file into a Told once the launch ended (supervise.py, for ending.py's rules), and
during it for the ranks that hold SIGINT. A process of no such launch tells nothing. Few imports: a
rank tells its first event from its first statement (commbench/__main__.py).

The events, each with the pid of the process that told it:
- `guarded`: this rank holds SIGINT (from its first statement): the command passes a Ctrl-C on to
  it, and SIGTERM to one still in the interpreter's start-up, where SIGINT raised a
  KeyboardInterrupt out of site's import ("Fatal Python error: init_import_site"); and it knows that
  ranks ran where rank 0 told nothing and mpirun gave no account.
- `started`: rank 0 runs, past MPI's start-up: a launch that ended without it failed before, and
  mpirun's own account is all the user has.
- `result` {path, absolute}: rank 0 made its result file (the one it chose where -o was not given):
  the command closes it where rank 0 cannot, and a later launch tidies beside it.
- `status` {status}: rank 0's exit status for the command where its run ended as it should (1: an
  element was wrong), every rank exiting 0.
- `spoke` {status, text}: rank 1 said the ending for a rank 0 that did not report (its watchdog):
  the command closes the file rank 0 left open with them, and says no second line.
"""

import contextlib
import json
import os
from dataclasses import dataclass
from typing import Optional

EVENTS_VAR = "COMMBENCH_EVENTS"
EVENTS_NAME = "events.jsonl"

GUARDED, STARTED, RESULT, STATUS, SPOKE = "guarded", "started", "result", "status", "spoke"


def tell(event: str, **fields) -> bool:
    """Appends this process's event to its launch's events file; False where it has none, or the
    file cannot take it."""
    path = os.environ.get(EVENTS_VAR)
    if not path:
        return False
    # One write of a file opened to append: the lines of ranks that tell at once do not interleave.
    # ASCII JSON: a path's bytes that are no UTF-8 (Python's surrogates) travel as \udcXX escapes.
    line = json.dumps({"event": event, "pid": os.getpid(), **fields}) + "\n"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError:
        return False
    return True


def rank_started(rank: int) -> None:
    if rank == 0:
        tell(STARTED)


def rank_status(rank: int, status: int) -> int:
    """The exit status of a rank whose run ended as it should, the command's being `status`. Under
    commbench's own launch rank 0 tells `status` and every rank exits 0: a rank's non-zero exit made
    mpirun print its box of a failed job ("prterun detected that one or more processes exited with
    non-zero status") under a run that found what it looked for."""
    if not status or not os.environ.get(EVENTS_VAR):
        return status
    if rank == 0 and not tell(STATUS, status=status):
        return status  # the command cannot read it: the status goes the launch's way, box and all
    return 0


def speak_for_rank_0(status: str, text: str) -> None:
    tell(SPOKE, status=status, text=text)


def announce_result(path: str) -> None:
    tell(RESULT, path=path, absolute=os.path.abspath(path))


@dataclass(frozen=True)
class Told:
    """What the ranks of a launch told (the events file read once): whether rank 0 started, the
    status it left, rank 1's (status, text) for rank 0, the result file as given and as an absolute
    path, and the pids of the ranks that hold SIGINT."""
    started: bool = False
    status: Optional[int] = None
    spoken: Optional[tuple[str, str]] = None
    result: Optional[str] = None
    result_path: Optional[str] = None
    guarded: frozenset = frozenset()

    def launched_status(self, status: int) -> int:
        """The command's status from a launch that ended with `status`: rank 0's, where it told one."""
        return status if status != 0 or self.status is None else self.status


def read(path: str) -> Told:
    """The events of the file at `path`; a line that is no event (a rank killed as it wrote) is
    passed over, and a file that is not there told nothing."""
    seen: dict = {"guarded": set()}
    with contextlib.suppress(OSError), open(path, encoding="ascii", errors="replace") as f:
        for line in f:
            try:
                e = json.loads(line)
                kind = e["event"]
                if kind == GUARDED:
                    seen["guarded"].add(int(e["pid"]))
                elif kind == STARTED:
                    seen["started"] = True
                elif kind == STATUS:
                    seen["status"] = int(e["status"])
                elif kind == SPOKE:
                    seen["spoken"] = (str(e["status"]), str(e["text"]))
                elif kind == RESULT:
                    seen["result"], seen["result_path"] = str(e["path"]), str(e["absolute"])
            except (ValueError, KeyError, TypeError):
                continue
    return Told(**{**seen, "guarded": frozenset(seen["guarded"])})
