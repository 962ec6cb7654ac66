"""The standalone launch's backstop for a rank stopped (SIGSTOP) where no watchdog runs: before the
ranks' watchdogs are up, or once the run has ended.

Until every rank has joined the watchdog's side channel (launch/watchdog.py), the ranks wait for each
other in MPI's start-up and in the collectives that set the channel up, where no deadline of theirs
runs: one rank stopped there held the others for good, whatever --timeout said. The command that
started the ranks sees every process of the launch (mpirun's session, on its one host), so it watches
for ranks stopped past --timeout and a margin and, where no rank has said a line that ends the run,
ends them itself with SIGKILL. mpirun then ends the job as for a killed rank (its session folder
removed), and the command closes the result file saying which ranks were stopped (a file rank 0
completed stays complete). While the watchdogs run they end every stop sooner (--timeout after the
size began, and a second or two).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from typing import Callable

from .relay import Relay
from .watchdog import GRACE_S

# How long past --timeout a rank stays stopped before the launch ends it: beyond the watchdog's own
# ending of a stop once it is up (a rank's deadline, then the grace it leaves rank 0 to speak before
# it speaks itself), twice that grace, so that the two never race.
MARGIN_S = 2 * GRACE_S
# How long the ranks of a standalone launch have, once the command is interrupted, to report before
# the command kills the launch whole (supervise.launch).
STOP_WITHIN_S = 10.0
POLL_S = 1.0


def session_members(sid: int) -> list[int]:
    """The processes of session `sid` but its leader: the ranks of a single-host mpirun."""
    members = []
    for name in os.listdir("/proc"):
        if name.isdecimal() and int(name) != sid:
            with contextlib.suppress(OSError):
                if os.getsid(int(name)) == sid:
                    members.append(int(name))
    return members


def _stopped_ranks(pids: list[int]) -> dict[int, int]:
    """{pid: rank} of the ranks among `pids` stopped by a signal (state T; not a debugger's t)."""
    stopped = {}
    for pid in pids:
        with contextlib.suppress(OSError, ValueError):
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]  # after the command's name, which may hold spaces
            if state != "T":
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
            if b"OMPI_COMM_WORLD_RANK" in env:
                stopped[pid] = int(env[b"OMPI_COMM_WORLD_RANK"])
    return stopped


class Backstop(threading.Thread):
    """Watches the launch whose mpirun is `leader` (its session's leader) until stop(); `ended`: the
    ranks it ended, sorted (empty while it ended none). It leaves alone a run that is ending already:
    `relayed` (the launch's stderr relay) has passed on a line that ends it, or `interrupted()`."""

    def __init__(self, leader: int, timeout_s: float, relayed: Relay, interrupted: Callable[[], bool]):
        super().__init__(name="commbench-backstop", daemon=True)
        self.leader, self.limit_s, self.relayed, self.interrupted = leader, timeout_s + MARGIN_S, relayed, interrupted
        self.ended: list[int] = []
        self._done = threading.Event()

    def run(self) -> None:
        since: dict[int, float] = {}
        while not self._done.wait(POLL_S):
            now = time.monotonic()
            stopped = _stopped_ranks(session_members(self.leader))
            since = {pid: since.get(pid, now) for pid in stopped}
            late = [pid for pid, t in since.items() if now - t > self.limit_s]
            if late and self.relayed.ending is None and not self.interrupted():
                self.ended = sorted(stopped[pid] for pid in late)
                self.relayed.muted = True  # mpirun's notice of the ranks ended: the command says why
                for pid in late:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                return

    def stop(self) -> None:
        self._done.set()

    def text(self) -> str:
        """The error of a run it ended."""
        ranks = f"rank{'s' if len(self.ended) > 1 else ''} {', '.join(map(str, self.ended))}"
        # Where no watchdog runs: before they are all up, or once the run ended (MPI's finalize
        # waits for every rank).
        return (f"{ranks} stopped for more than --timeout {self.limit_s - MARGIN_S:g} s while the ranks started or "
                f"ended, where no watchdog sees it: the launch ended {'it' if len(self.ended) == 1 else 'them'}")
