"""A deadline on an MPI rank's start-up: MPI_Init and the first collective that meets every rank.

MPI_Init waits for every host's daemon, and no deadline of commbench's ran there: a host that lost
30 % of its packets held every rank in it for 40-240 s, with no file, no line and no exit. The wait
is inside the MPI library, with the interpreter's lock held, so neither a thread nor a Python signal
handler of this process could act. A child forked before the wait can: it ends the rank at the
deadline unless the rank says it has started (or has ended) first. Rank 0's child says why, naming
the hosts that its host had to resend packets to, as the kernel counts them (`ss`)."""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from typing import Callable, Optional

# The least start-up a deadline allows, whatever --timeout is: ranks that import torch meet in MPI_Init
# only once the slowest of them has, seconds on a busy host.
START_UP_MIN_S = 10.0
# How long a rank other than 0 outlives its deadline: rank 0 says the line first, and mpirun, seeing
# another rank end, may end rank 0 (and its child) before it could.
OTHERS_AFTER_S = 2.0
# How long rank 0's child may spend finding the hosts it resent packets to.
LOOK_S = 2.0
# `ss -ti`: a socket's line (state, queues, local and peer address), then its indented TCP facts, of
# which retrans:N/TOTAL counts the segments resent since the connection opened.
_TOTAL_RESENT = re.compile(r"\bretrans:\d+/(\d+)")
# `ss -p`: the processes that hold a socket, users:(("prted",pid=12,fd=5),...).
_OWNER = re.compile(r"\bpid=(\d+)")


def deadline_s(timeout_s: float) -> float:
    return max(timeout_s, START_UP_MIN_S)


def arm(timeout_s: float, rank: Optional[int]) -> Callable[[], None]:
    """Starts the deadline; returns the call that ends it, once this rank's start-up is done."""
    r, w = os.pipe()
    # A program of its own, not a bare fork: a fork kept the rank's command line, folder and
    # variables, and was taken for the rank by whoever looks for it by those (a test's signals).
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "PRTE_"))}
    child = subprocess.Popen(
        [sys.executable, "-c", "from commbench.launch.startup import watch; watch()", str(r), str(deadline_s(timeout_s)),
         str(os.getpid()), "" if rank is None else str(rank), os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")],
        # A session of its own: a Ctrl-C or a launcher's signal to the rank's group is the rank's.
        pass_fds=(r,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, cwd="/", env=env, start_new_session=True)
    os.close(r)

    def disarm() -> None:
        os.close(w)  # the child reads the end of the pipe, and leaves
        child.wait()
    return disarm


def watch() -> None:
    """The child (arm's arguments in sys.argv): ends the rank at the deadline, unless the pipe closes
    first (the rank started, or ended: its end of the pipe closes with it)."""
    r, limit, rank_pid, rank, local = sys.argv[1:6]
    _watch(int(r), float(limit), int(rank_pid), int(rank) if rank else None, local)


def _watch(r: int, limit: float, rank_pid: int, rank: Optional[int], local: str) -> None:
    # A Ctrl-C reaches the whole process group: the rank says that line, not its child.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    if select.select([r], [], [], limit)[0]:
        return
    # Rank 0 says the run's line; a host's first other rank speaks too where its host resent packets:
    # at start-up only a host's own kernel knows that its link loses them. The rank's launch on this
    # host: its parent (the host's daemon, or mpirun) and what that started.
    parent = parent_of(rank_pid)
    resent = resent_text([rank_pid] if parent is None else [parent])
    if rank == 0:
        os.write(2, f"commbench: error: the ranks did not all start within {limit:g} s (MPI's start-up, bounded "
                    f"by --timeout){resent}\n".encode())
    else:
        if resent and local == "0":
            os.write(2, f"commbench: error on rank {rank}: the ranks did not all start within {limit:g} s{resent}\n"
                     .encode())
        time.sleep(OTHERS_AFTER_S)
    try:
        os.kill(rank_pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def resent_text(roots: Iterable[int]) -> str:
    """'; host h2 resent packets: 14 to 10.0.0.3 (h3): a link between them loses packets', naming the
    peers that the TCP connections of the processes `roots` and their descendants (a launch: its
    daemons, ranks, ssh) resent segments to; '' where none did or `ss` cannot tell. Only theirs: on a
    shared host another job's lossy connections say nothing of this one's links."""
    try:
        out = subprocess.run(["ss", "-tinp"], capture_output=True, text=True, timeout=LOOK_S).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    ours = _tree(roots)
    resent: dict[str, int] = {}
    lines = out.splitlines()
    for head, facts in zip(lines, lines[1:]):
        fields, count = head.split(), _TOTAL_RESENT.search(facts)
        if count is None or not facts[:1].isspace() or len(fields) < 5 or not fields[1].isdigit():
            continue
        if not ours & {int(pid) for pid in _OWNER.findall(head)}:
            continue
        addr = fields[4].rsplit(":", 1)[0].strip("[]")
        if int(count.group(1)) and not addr.startswith("127.") and addr != "::1":
            resent[addr] = resent.get(addr, 0) + int(count.group(1))
    if not resent:
        return ""
    order = sorted(resent, key=lambda a: -resent[a])
    names = _names(order)
    named = ", ".join(f"{resent[a]} to {names[a]}" for a in order)
    return f"; host {socket.gethostname()} resent packets: {named}: a link between them loses packets"


def parent_of(pid: int) -> Optional[int]:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])  # the name in parentheses may hold spaces
    except (OSError, ValueError, IndexError):
        return None


def _tree(roots: Iterable[int]) -> set[int]:
    """The processes `roots` and every descendant of theirs alive now."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            parent = parent_of(int(entry))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry))
    found: set[int] = set()
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


def _names(addrs: list[str]) -> dict[str, str]:
    """'10.0.0.3 (h3)' for each address that has a name (the hosts file, DNS), else the address; all
    within LOOK_S. A reverse lookup takes no timeout, and an address DNS does not know cost seconds each
    (the lines that said them came a minute late), so each asks in a thread of its own."""
    found: dict[str, str] = {}

    def ask(addr: str) -> None:
        with contextlib.suppress(OSError):
            found[addr] = f"{addr} ({socket.gethostbyaddr(addr)[0]})"
    asking = [threading.Thread(target=ask, args=(a,), daemon=True) for a in addrs]
    until = time.monotonic() + LOOK_S
    for t in asking:
        t.start()
    for t in asking:
        t.join(max(0.0, until - time.monotonic()))
    return {a: found.get(a, a) for a in addrs}


