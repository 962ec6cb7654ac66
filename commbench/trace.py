"""Where a command's fixed cost goes: with COMMBENCH_TRACE_START=1 (which the ranks inherit; 0, false,
no, off or empty: off) every
phase of a command prints one line on stderr, `# start <rank or top> <phase> <ms since the command
began>`. The command began when the process that the user started did: its own start as the kernel
recorded it (interpreter start-up and imports included), handed on to the ranks it launches, so that
all the lines of a run share one clock. A rank started by the user's own launcher counts from its
own start."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Optional

VAR = "COMMBENCH_TRACE_START"
# The epoch second at which the command began, set by the first commbench process for those it starts.
BEGAN_VAR = "COMMBENCH_TRACE_BEGAN"
_RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK", "SLURM_PROCID", "RANK")


def enabled() -> bool:
    """Whether tracing is on: COMMBENCH_TRACE_START set to anything but 0, false, no, off or nothing."""
    return os.environ.get(VAR, "").strip().lower() not in ("", "0", "false", "no", "off")


def _process_began() -> float:
    """This process's start as epoch seconds: its start in clock ticks after boot (/proc/self/stat)
    against the time since boot (/proc/uptime); now where /proc cannot say."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.time()


def _began() -> Optional[float]:
    if not enabled():
        return None
    if BEGAN_VAR not in os.environ:
        os.environ[BEGAN_VAR] = repr(_process_began())  # the ranks launched from here inherit it
    try:
        return float(os.environ[BEGAN_VAR])
    except ValueError:
        return _process_began()


def phase(name: str, at: Optional[float] = None) -> None:
    """One line for the phase that just ended (at epoch second `at`; None: now), where tracing is on."""
    began = _began()
    if began is None:
        return
    who = next((os.environ[v] for v in _RANK_VARS if os.environ.get(v, "").isdecimal()), "top")
    with contextlib.suppress(OSError):  # a diagnostic: a stderr that cannot take it (2>/dev/full) stops nothing
        sys.stderr.write(f"# start {who} {name} {1000 * ((at or time.time()) - began):.0f}\n")
        sys.stderr.flush()


def launched() -> None:
    """In a process that a commbench process launched (a rank of the standalone launch): `started`,
    when the kernel started it, so that the launcher's time (mpirun's start, its daemon's fork) is
    told from the rank's own interpreter start and imports."""
    if enabled() and BEGAN_VAR in os.environ:
        phase("started", at=_process_began())
