"""A watchdog on every rank, so that a dead or stalled rank never hangs a run or loses its rows.

Each rank runs a daemon thread, armed at the start of every size (`arm`). The ranks share a side
channel independent of MPI and gloo, relayed per host (relay_parents): every rank holds one TCP
connection to its host's first rank (its leader, over loopback), each leader one to rank 0, and
rank 0 one per other host and per rank of its own host, so that 8,000 ranks on 1,000 hosts cost
rank 0 about 1,000 sockets, not 8,000. Every rank sends a beat every TICK_S; a leader forwards its
ranks' beats in one line with its own, their goodbyes and failures at once, and names those whose
connection closed without a goodbye. Rank 0 thereby knows at once when a rank's process ended (its
connection closed, whatever killed it; every rank of a host whose leader's connection closed) and
which ranks stopped (no beat for STALE_S). Lines up are `beat R[,R...]`, `bye R`, `fail R STATUS
TEXT` and `lost R[,R...]`; lines down (`done`, `reporting`, `bye`) a leader passes on to its ranks.

The thread, not the main thread, does the ending: the main thread may be blocked in a native MPI
loop (they release the GIL, so the thread runs) where no Python signal handler would ever run;
signals reach the thread through signal.set_wakeup_fd.

An ending (the size ran past --timeout, a peer was lost, SIGINT/SIGTERM, or a failure on any rank)
is reported by rank 0 alone: it closes the result file with a status saying what happened, prints
one line, tells the other ranks, and every rank leaves with os._exit(1) (under mpirun the launcher
then ends the rest, stopped ones included).
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import select
import signal
import socket
import struct
import sys
import threading
import time
from typing import Optional, Sequence

import click

from ..errors import described, one_line
from .events import speak_for_rank_0
from .startup import resent_text
from .world import LAUNCHER_GONE

TICK_S = 0.25
# Connections a listener holds waiting to be accepted: a leader per host may connect at once.
BACKLOG = 4096
# Rank 0 with more ranks reporting to it than this raises its soft limit on open files first.
FILES_RAISED_ABOVE = 512
# A rank silent this long is stopped (or its host is gone).
STALE_S = 1.0
# How long rank 0 gathers news of lost ranks before it reports: the ranks a host lost together, told
# by its leader or by the leader's own connection. (A killed rank's MPI peers, which the MPI library
# ends when their connection to it closes, wait ABORT_DELAY_S first: launch/world.py.) Short: the
# launcher that saw the rank die ends rank 0 soon after, and mpirun drops what it says from then on.
LOST_SETTLE_S = 0.1
# How long a rank other than 0 waits for rank 0 to report its ending and end before it leaves on its own.
GRACE_S = 3.0
# How long they wait once rank 0 said it is reporting: its file's last write may take seconds on a
# busy host (a rank that left at GRACE_S made mpirun end rank 0 with the file still `running`).
REPORTING_S = 30.0
CONNECT_TIMEOUT_S = 10.0
# How often rank 0 looks whether every rank said goodbye: the ranks end a run within milliseconds.
GOODBYE_POLL_S = 0.002

_current: Optional["Watchdog"] = None
_started = False  # a watchdog ran in this process


def guard_start_up(early: Sequence[int] = ()) -> None:
    """On a launched rank, until its watchdog takes SIGINT over: a Ctrl-C ends the rank at once, rank
    0 saying so in the line of an interrupted run (Python's KeyboardInterrupt printed a traceback
    from whichever import it hit, on every rank). Once a watchdog has run, SIGINT is Python's again.
    `early`: the signals that came before this guard was set (__main__ holds them)."""
    from .world import detect_launcher, launch_rank, on_hang_up
    rank = launch_rank()
    if rank is None:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        # Until the command line's own handler (cli.main): a SIGTERM or a hang-up in its imports,
        # where nothing was made yet, ended the command on the signal without a word.
        signal.signal(signal.SIGTERM, _terminated_in_start_up)
        on_hang_up(_terminated_in_start_up)
        for signum in early:
            if signum != signal.SIGINT:
                _terminated_in_start_up(signum, None)
        if early:
            raise KeyboardInterrupt
        return
    # A rank ends on a SIGTERM or hang-up as it did before __main__ kept them: on the signal itself,
    # which the launch's account names.
    for ending in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(ending) is not signal.SIG_IGN:
            signal.signal(ending, signal.SIG_DFL)
    for signum in early:
        if signum != signal.SIGINT:
            os.kill(os.getpid(), signum)
    early = [signum for signum in early if signum == signal.SIGINT]
    under_mpi = detect_launcher() == "mpi"

    def interrupted(signum, frame):
        if _started:
            signal.default_int_handler(signum, frame)
        if rank == 0:
            os.write(2, f"commbench: error: {_interrupted_text('', signum)}\n".encode())
        elif under_mpi:
            # The other ranks leave after rank 0 has spoken: one that left first made mpirun SIGTERM
            # rank 0, and a SIGTERM pending beside the SIGINT ended it before its handler ran (a
            # busy host), leaving mpirun's banner where the line should be. mpirun's SIGTERM ends
            # this rank once rank 0 has left (at once: no handler of ours runs now); GRACE_S bounds
            # the wait where rank 0 is gone already.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            time.sleep(GRACE_S)
        os._exit(1)
    signal.signal(signal.SIGINT, interrupted)
    if early:
        interrupted(early[0], None)


def _terminated_in_start_up(signum, frame) -> None:
    os.write(2, b"commbench: terminated\n")
    os._exit(128 + signum)


# What a line says of where the run was before the first size armed the watchdog (its label then).
UNARMED = "before the first size"


def output_closed(error: Exception) -> Optional[str]:
    """Why a write to this rank's output failed where the launch closed it, ending the job (the command
    that started it, or mpirun, was killed): an interrupt, not the rank's failure. None otherwise."""
    if isinstance(error, OSError) and error.errno in (errno.EIO, errno.EPIPE):
        return f"the launch closed this rank's output: {error.strerror}"
    return None


def _interrupted_text(label: str, signum: int) -> str:
    why = "the command that launched the ranks ended" if signum == LAUNCHER_GONE else signal.Signals(signum).name
    return f"{label or UNARMED}: interrupted ({why})"


def start(world, timeout_s: float, reporter) -> None:
    """Starts this rank's watchdog (collective: every rank calls it once per run)."""
    global _current, _started
    _current, _started = Watchdog(world, timeout_s, reporter), True


def current() -> Optional["Watchdog"]:
    return _current


def arm(label: str) -> None:
    """A new size starts: `label` (e.g. 'allreduce ring 4M') must end within --timeout."""
    if _current is not None:
        _current.arm(label)


def finish() -> None:
    """The run ended on this rank. Rank 0 calls it complete only once every other rank has ended it
    too: a rank that stops after its last size (one left out of numerics' smaller counts, waiting in
    the barrier that ends them) may hold another rank in that barrier while the collective's
    algorithm lets rank 0 through. That rank then timed out alone, blaming rank 0, after rank 0 had
    written a complete file."""
    if _current is not None:
        _current.await_goodbyes()
    stop()


def stop() -> None:
    """The run ended on every rank (done, or refused everywhere): nothing more to watch."""
    global _current
    if _current is not None:
        _current.stop()
        _current = None


def _launcher_gone_after_the_run(signum, frame) -> None:
    """The command that launched the ranks ended (SIGKILLed) after this rank's last size: the run is
    measured, and rank 0 closes its file whole. The signal's default action ended rank 0 as it did,
    the file left `running` (6 runs in 13 of a SIGKILL 0-30 ms after the last row) and at times a
    half-written temporary file beside it. A rank that has not ended REPORTING_S later (nothing of
    the launch is left to end it) leaves then."""
    leave = threading.Timer(REPORTING_S, os._exit, args=(1,))
    leave.daemon = True  # a rank that ends meanwhile does not wait for it
    leave.start()


def relay_parents(hosts: list[str]) -> dict[int, int]:
    """{rank: the rank it reports to} for every rank but 0: a host's first rank (its leader) and the
    ranks of rank 0's own host to rank 0, every other rank to its host's leader."""
    first: dict[str, int] = {}
    for rank, host in enumerate(hosts):
        first.setdefault(host, rank)
    return {rank: 0 if first[host] == rank else first[host] for rank, host in enumerate(hosts) if rank}


def _readable(conns, timeout_s: float) -> set:
    """The connections (or file descriptors) with something to read or closed: poll, not select,
    whose descriptors end at 1024."""
    poller, by_fd = select.poll(), {}
    for c in conns:
        fd = c if isinstance(c, int) else c.fileno()
        by_fd[fd] = c
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    return {by_fd[fd] for fd, _ in poller.poll(max(0, int(timeout_s * 1000)))}


def _side_channel(world) -> tuple[Optional[socket.socket], dict]:
    """(this rank's connection to the rank it reports to, the connections of the ranks that report
    to it, by rank); no channel where rank 0's address is unknown (the watchdog then still ends its
    own rank, naming no other)."""
    from ..errors import CommbenchError
    from .rendezvous import rendezvous_address
    if world.size == 1:
        return None, {}
    parents = relay_parents(world.hosts)
    children = [r for r, p in parents.items() if p == world.rank]
    listener, addr = None, None
    try:
        addr = os.environ.get("MASTER_ADDR") if world.launcher == "torchrun" else rendezvous_address(world)
    except CommbenchError as e:
        addr = None
        if world.rank == 0:
            click.echo(one_line(f"warning: the ranks of the other hosts run unwatched by rank 0: {e}"), err=True)
    if world.rank == 0:
        if addr:
            listener = socket.create_server(("", 0), backlog=BACKLOG)
            addr = (addr, listener.getsockname()[1])
    elif children:  # a leader: its host's ranks reach it over loopback
        listener = socket.create_server(("127.0.0.1", 0), backlog=BACKLOG)
    addr = world.bcast(addr if world.rank == 0 else None)
    ports = world.bcast(world.gather(listener.getsockname()[1] if listener is not None and world.rank else None))
    if addr is None:
        if listener is not None:
            listener.close()
        return None, {}
    up = None
    # A rank that cannot reach the rank it reports to (a firewall between hosts) runs unwatched by
    # it, not refused.
    if world.rank != 0:
        parent = parents[world.rank]
        try:
            up = socket.create_connection(tuple(addr) if parent == 0 else ("127.0.0.1", ports[parent]),
                                          timeout=CONNECT_TIMEOUT_S)
            up.sendall(f"{world.rank}\n".encode())
            up.settimeout(None)
        except OSError:
            up = None
    peers = {}
    if listener is not None:
        if len(children) > FILES_RAISED_ABOVE:
            _more_files()  # before accepting: accept() past the soft limit fails
        listener.settimeout(CONNECT_TIMEOUT_S)
        with listener:
            with contextlib.suppress(OSError):
                while len(peers) < len(children):
                    conn, _ = listener.accept()
                    conn.settimeout(CONNECT_TIMEOUT_S)
                    peers[int(conn.makefile().readline())] = conn
                    conn.settimeout(None)
    return up, peers


# struct tcp_info (linux/tcp.h): tcpi_total_retrans, the segments a connection has resent, is the
# 32-bit field at byte 100; the struct has grown since, never moved a field.
_TOTAL_RETRANS = struct.Struct("=I")
_TOTAL_RETRANS_AT = 100


def _resent(conn: socket.socket) -> int:
    """The segments the kernel resent on conn since it opened; 0 where the kernel does not say."""
    try:
        info = conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    except (OSError, AttributeError):  # not TCP, closed, or no TCP_INFO here
        return 0
    return _TOTAL_RETRANS.unpack_from(info, _TOTAL_RETRANS_AT)[0] if len(info) >= 104 else 0


def _more_files() -> None:
    """Rank 0 of a thousand hosts holds a socket per host: the soft limit on open files up to the hard one."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Watchdog:
    def __init__(self, world, timeout_s: float, reporter):
        self.rank, self.timeout_s, self.reporter = world.rank, timeout_s, reporter
        self.label, self.deadline, self.stopped, self.up_finished = "", None, False, False
        self.up, self.peers = _side_channel(world)
        self.hosts = world.hosts
        # The user's Open MPI mpirun (PRRTE's), which waits for good for the daemon of a host that
        # stopped answering: rank 0's line says to end it (commbench's own launch ends its mpirun).
        self.user_mpirun = world.launcher == "mpi" and os.environ.get("PRTE_LAUNCHED") == "1"
        self.watched = self.up is not None  # another rank with a channel to rank 0
        self.reported = False  # rank 0 said it reported the ending
        now = time.monotonic()
        # Rank 0: the ranks behind each connection (a leader's: its host's); a leader's ranks: their own.
        below: dict[int, list[int]] = {}
        if self.rank == 0:
            for r, parent in (relay_parents(world.hosts) if world.size > 1 else {}).items():
                below.setdefault(parent, []).append(r)
        self.behind = {c: [c, *below.get(c, [])] for c in self.peers}
        # Rank 0: when each rank was last heard, directly or through its leader. A rank that never
        # reached its leader runs unwatched (as one that cannot reach rank 0): it enters here with
        # its leader's first beat, which names every rank connected to it.
        self.heard = {c: now for c in self.peers} if self.rank == 0 else {}
        self.beats: set[int] = set(self.peers) if self.up is not None else set()  # a leader: its ranks heard
        self._beat_at = 0.0  # when this rank last sent its beat
        self.finished: set[int] = set()  # ranks that said goodbye
        self.lost: list[int] = []  # rank 0: ranks whose connection closed without a goodbye
        self._lost_at = 0.0  # rank 0: when the first of them was lost
        self.failures: dict[int, tuple[str, str]] = {}  # rank 0: (status, text) other ranks reported
        self.resent: dict[int, int] = {}  # rank 0: what each connection's other end last said it resent
        self._looked, self.paused_s = now, 0.0  # the thread's last look; its longest pause (_note_pause)
        self._buffers = {r: b"" for r in self.peers}
        # Reentrant: the main thread that took it in fail() may stop the watchdog on its way out.
        self._ending = threading.RLock()
        self._io = threading.RLock()
        self._wake, wake = os.pipe()
        os.set_blocking(wake, False)
        signal.set_wakeup_fd(wake)
        # The thread acts on them; a handler (not the default) keeps the process alive until it has. A
        # rank of commbench's own launch also hears that the command which launched it ended.
        # A hang-up the standalone launch passed on, unless the ranks were started to ignore it.
        hang_up = [signal.SIGHUP] if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN else []
        watched = (signal.SIGINT, signal.SIGTERM, *hang_up, *([LAUNCHER_GONE] if world.launcher == "standalone" else []))
        self._handlers = {s: signal.signal(s, lambda *_: None) for s in watched}
        threading.Thread(target=self._watch, name="commbench-watchdog", daemon=True).start()

    @property
    def where(self) -> str:
        """Where the run was, for a line: the size being measured, or UNARMED (a rank ended in the
        set-up, after rank 0 made the file: ': rank 0 did not arrive' said nothing of where)."""
        return self.label or UNARMED

    def arm(self, label: str) -> None:
        self.label = label
        self.deadline = time.monotonic() + self.timeout_s

    def await_goodbyes(self) -> None:
        """Rank 0: until every rank it has heard from said goodbye, within --timeout. The thread
        watches meanwhile: a rank silent past the deadline, lost or failing ends the run as in a
        size, named. Another rank says goodbye as it stops."""
        if self.rank != 0:
            return
        self.arm("after the last size")
        while set(self.heard) - self.finished:
            time.sleep(GOODBYE_POLL_S)

    def stop(self) -> None:
        # Not while the thread ends the run: its ending (a signal read just as the last size ended)
        # closed the file as interrupted while the main thread closed it whole, the line and the file
        # at odds. The thread's ending leaves the process; one that comes after this ends nothing.
        with self._ending:
            self.stopped, self.deadline = True, None
        with self._io:
            if self.up is not None:
                # A leader passes its ranks' goodbyes on before its own: rank 0 would take a host
                # whose leader left first for lost.
                until = time.monotonic() + GRACE_S
                while set(self.peers) - self.finished and time.monotonic() < until:
                    self._read_peers(TICK_S)
                self._send(self.up, f"bye {self.rank}")
            for conn in list(self.peers.values()):
                self._send(conn, "bye")
        signal.set_wakeup_fd(-1)
        for s, handler in self._handlers.items():  # what the process had before
            signal.signal(s, _launcher_gone_after_the_run if s == LAUNCHER_GONE else handler)

    # ---- the thread --------------------------------------------------------------------------

    def _watch(self) -> None:
        while not self.stopped:
            # Woken by the other end too: of ranks that end one after another (a rank that lost its
            # peer may fail at once), the first is the one to name.
            others = list(self.peers.values()) + ([self.up] if self.up is not None else [])
            # A loss being settled is said the moment its time is up: the launcher that saw the rank
            # die ends this one a few hundred milliseconds later, and its line with it.
            settled_in = self._lost_at + LOST_SETTLE_S - time.monotonic() if self._lost_at else TICK_S
            ready = _readable([self._wake, *others], min(TICK_S, max(0.0, settled_in)))
            self._note_pause()
            news = None
            with self._io:
                if self.peers:
                    self._read_peers(0)
                if self.up is not None:
                    # One beat a tick, however often the ranks behind a leader wake it.
                    if time.monotonic() - self._beat_at >= TICK_S:
                        # With what this rank's channel resent: rank 0 sees its own side's alone.
                        self._send(self.up, "beat " + ",".join(map(str, sorted({self.rank, *self.beats})))
                                   + f" {_resent(self.up)}")
                        self.beats.clear()
                        self._beat_at = time.monotonic()
                    news = self._read_up(0)
            # Outside the lock: an ending on the main thread holds _ending and then takes _io.
            if news and not self.stopped:  # rank 0 reported an ending, or is gone: this rank leaves too
                self.end("peer-lost" if news == "gone" else "failed", f"{self.where}: rank 0 did not arrive: its process ended")
            signum = os.read(self._wake, 16)[-1] if self._wake in ready else None
            # A peer's end comes first: a launcher that saw a rank die, or fail, sends this one SIGTERM
            # next (with the loss settled or not: the launcher ends the job for it).
            if self.lost and not self.stopped:
                if not self._lost_at:
                    self._lost_at = time.monotonic()
                    self._close_ahead("peer-lost", self._lost_text())
                if signum is not None or time.monotonic() - self._lost_at >= LOST_SETTLE_S:
                    self.end("peer-lost", self._lost_text())
            # A loss being settled comes first: a peer of the lost rank fails because of it.
            if self.failures and not self.stopped and not self.lost:
                rank, (status, text) = next(iter(self.failures.items()))
                self.end(status, self._peer_failure(rank, status, text))
            # A rank 0 stopped past its deadline meets the launch's SIGTERM when it resumes: the
            # deadline it missed is the news.
            if self.deadline is not None and time.monotonic() > self.deadline:
                self.end("timeout", self._absent_text(f"did not arrive within --timeout {self.timeout_s:g} s"))
            if signum is not None:
                self.end("interrupted", _interrupted_text(self.where, signum))
            # Before the first size nothing is armed, yet a collective of the set-up (a subgroup, a
            # communicator) waits for every rank: one silent for --timeout would hang it for good.
            if self.deadline is None and not self.stopped and self.rank == 0:
                silent = self._silent(max(self.timeout_s, STALE_S))
                if silent:
                    self.end("timeout", f"{self.where}: {_ranks(silent)} did not "
                                        f"arrive within --timeout {self.timeout_s:g} s")

    def _note_pause(self) -> None:
        """A thread that did not run for STALE_S: this process was stopped (or starved). What the
        other ranks did meanwhile is unknown, not silence: they count as heard now."""
        now = time.monotonic()
        if now - self._looked > STALE_S:
            self.paused_s = max(self.paused_s, now - self._looked)
            self.heard = dict.fromkeys(self.heard, now)
        self._looked = now

    def _read_peers(self, wait_s: float) -> None:
        """Rank 0 and leaders: the beats, goodbyes and failures of the ranks that report to them; a
        leader passes them on (beats with its own next one)."""
        if not self.peers:
            return
        ready = _readable(list(self.peers.values()), wait_s)
        for rank, conn in list(self.peers.items()):
            if conn not in ready:
                continue
            try:
                data = conn.recv(65536)
            except OSError:
                data = b""
            if self.rank == 0:
                self.heard[rank] = time.monotonic()
            if not data:
                del self.peers[rank]
                if rank not in self.finished and rank not in self.failures and not self.stopped:
                    self._lose([rank])
                # A leader's end cuts its host's ranks off from rank 0, alive or not (a leader killed
                # alone, or its whole host's processes): unheard from now, not lost.
                for r in self.behind[rank][1:]:
                    self.heard[r] = -math.inf
                continue
            self._buffers[rank] += data
            *lines, self._buffers[rank] = self._buffers[rank].split(b"\n")
            for line in lines:
                self._take(line.decode(errors="replace"), rank)
                if rank in self.finished:
                    del self.peers[rank]
                    break

    def _take(self, line: str, via: int) -> None:
        """A line that came through the connection of rank `via`."""
        word, _, rest = line.partition(" ")
        if word == "beat":
            listed, _, resent = rest.partition(" ")
            ranks = [int(r) for r in listed.split(",") if r.isdecimal()]
            if self.rank == 0:
                now = time.monotonic()
                self.heard.update((r, now) for r in ranks)
                if resent.isdecimal():
                    self.resent[via] = int(resent)
            else:
                self.beats.update(ranks)
            return
        if self.up is not None:  # a leader: goodbyes and failures go on at once
            self._send(self.up, line)
        if word == "bye" and rest.isdecimal():
            self.finished.add(int(rest))
        elif word == "fail" and self.rank == 0:
            rank, _, detail = rest.partition(" ")
            status, _, text = detail.partition(" ")
            if rank.isdecimal():
                self.failures.setdefault(int(rank), (status, text))
        elif word == "lost" and self.rank == 0:
            self._lose([int(r) for r in rest.split(",") if r.isdecimal()])

    def _lose(self, ranks: list[int]) -> None:
        """Ranks whose connection closed without a goodbye: rank 0's news, a leader's to pass on."""
        if self.rank == 0:
            self.lost += [r for r in ranks if r not in self.failures and r not in self.finished]
        elif self.up is not None:
            self._send(self.up, "lost " + ",".join(map(str, ranks)))

    def _read_up(self, wait_s: float) -> Optional[str]:
        """Other ranks: 'done' once rank 0 reported the ending, 'gone' once its process ended without
        finishing the run, else None."""
        if not _readable([self.up], wait_s):
            return None
        try:
            data = self.up.recv(4096)
        except OSError:
            data = b""
        for word in (b"reporting", b"done", b"bye"):  # a leader tells its host's ranks
            if word in data:
                for conn in list(self.peers.values()):
                    self._send(conn, word.decode())
        # "reporting": rank 0 says its own failure and ends the job; its end is no news to tell.
        self.reported = self.reported or b"done" in data or b"reporting" in data
        if b"done" in data:
            return "done"
        # Rank 0 may finish and exit while this rank still leaves its last size.
        self.up_finished = self.up_finished or b"bye" in data
        if data:
            return None
        self.up.close()
        self.up = None  # nothing more will come
        return None if self.up_finished else "gone"

    @staticmethod
    def _send(conn, word: str) -> None:
        try:
            conn.sendall(f"{word}\n".encode())
        except OSError:
            pass  # a side channel that broke is rank 0's news to tell

    # ---- what rank 0 says ------------------------------------------------------------------------

    def _silent(self, for_s: float) -> list[int]:
        now = time.monotonic()
        return [r for r, t in list(self.heard.items())
                if now - t > for_s and r not in self.failures and r not in self.finished]

    def _absent(self) -> list[int]:
        return sorted(set(self.lost) | set(self._silent(STALE_S)))

    def _lost_text(self) -> str:
        """Rank 0: the ranks whose process ended, and apart from them those merely silent."""
        lost = sorted(set(self.lost))
        silent = [r for r in self._silent(STALE_S) if r not in lost]
        ended = "their processes" if len(lost) > 1 else "its process"
        return f"{self.where}: {_ranks(lost)} did not arrive: {ended} ended" + \
            (f"; {_ranks(silent)} did not answer" if silent else "") + self._on_hosts(lost + silent)

    def _absent_text(self, what: str) -> str:
        if self.rank != 0:  # said only where rank 0 did not report: it is what is missing
            return f"{self.where}: did not finish within --timeout {self.timeout_s:g} s; rank 0 did not answer"
        absent = self._absent()
        if absent:
            return f"{self.where}: {_ranks(absent)} {what}{self._on_hosts(absent)}{self._mpirun_advice(absent)}"
        if self.paused_s > self.timeout_s:  # rank 0 itself was stopped past the deadline
            return (f"{self.where}: did not finish within --timeout {self.timeout_s:g} s; rank 0 did not answer: "
                    f"its process did not run for {self.paused_s:.0f} s")
        # The beats' connections resent nothing in time (a link losing 30 %: they are small): what rank
        # 0's own connections, MPI's among them, resent.
        return (f"{self.where}: did not finish within --timeout {self.timeout_s:g} s; every rank was alive in it"
                + (self._resent_text() or resent_text([os.getpid()])))

    def _resent_text(self) -> str:
        """Rank 0, every rank alive past the deadline: the hosts whose side channel had to resend
        packets, either way, as the kernels count them. The beats cross every host's link four times a second, and
        a link that loses packets shows here long before anything else names it (a host losing 30 %
        of its packets slowed every size until the deadline, with no host named)."""
        resent = {r: n for r, n in ((r, _resent(conn) + self.resent.get(r, 0)) for r, conn in self.peers.items()
                                    if self.hosts[r] != self.hosts[0]) if n}
        if not resent:
            return ""
        remote = {self.hosts[r] for r, conn in self.peers.items() if self.hosts[r] != self.hosts[0]}
        hosts = sorted({self.hosts[r] for r in resent})
        if len(remote) > 1 and set(hosts) == remote:  # every other host's: the loss is on rank 0's side
            return (f"; rank 0's connections to every other host resent packets ({sum(resent.values())} in all): "
                    f"host {self.hosts[0]} loses packets")
        counts = ", ".join(f"{h} {sum(n for r, n in resent.items() if self.hosts[r] == h)}" for h in hosts)
        return f"; packets resent to host{'s' if len(hosts) > 1 else ''} {counts}: {'they lose' if len(hosts) > 1 else 'it loses'} packets"

    def _mpirun_advice(self, absent: list[int]) -> str:
        """Under the user's mpirun, where every rank of another host is silent: what to do about the
        mpirun that may wait for good for that host's daemon (docs/launching.md)."""
        silent = [h for h in dict.fromkeys(self.hosts) if h != self.hosts[0]
                  and all(r in absent for r, x in enumerate(self.hosts) if x == h)]
        if not (self.user_mpirun and silent):
            return ""
        return (f"; mpirun may wait for good for its daemon on host{'s' if len(silent) > 1 else ''} "
                f"{', '.join(silent)}: end it once this line is out (Ctrl-C twice)")

    def _on_hosts(self, ranks: list[int]) -> str:
        """Across hosts, the hosts of `ranks`: a host is what a cluster team repairs."""
        if len(set(self.hosts)) < 2 or not ranks:
            return ""
        hosts = list(dict.fromkeys(self.hosts[r] for r in sorted(ranks)))
        return f" (host{'s' if len(hosts) > 1 else ''} {', '.join(hosts)})"

    def _peer_failure(self, rank: int, status: str, text: str) -> str:
        """What rank 0 says of an ending another rank reported (a Ctrl-C reaches every rank, the
        deadline passes on every rank: whichever comes first, the line is the same)."""
        if status == "timeout":
            return self._absent_text(f"did not arrive within --timeout {self.timeout_s:g} s")
        if status == "interrupted":
            # The signal reached every rank; rank 0's label says where the run was. A rank left out
            # of a rank count (scale, numerics) waits unarmed and would say 'before the first size'.
            why = text.rpartition(": interrupted ")[2]
            return f"{self.where}: interrupted {why}" if self.label and why else text
        absent = self._absent()
        return f"{self.where}: on rank {rank}: {text}" + (f"; {_ranks(absent)} did not arrive" if absent else "")

    # ---- the ending --------------------------------------------------------------------------

    def fail(self, error: Exception) -> None:
        """A failure in this rank's main thread. Ends the process where it involves other ranks;
        returns on rank 0 when its own failure is all there is to say (the caller says it and ends the
        job; the other ranks follow when rank 0's side channel closes)."""
        closed = output_closed(error)
        if closed:  # its SIGTERM may come after this rank's next line
            self.end("interrupted", f"{self.where}: interrupted ({closed})")
        # A failure caused by a peer that died arrives a moment after its connection closed.
        time.sleep(2 * TICK_S)
        text = described(error)
        # TimeoutError: a wait for peers that ran past --timeout inside a call (the GPU path's NCCL
        # waits): the same deadline as the watchdog's, seen from inside the call.
        status = "timeout" if isinstance(error, TimeoutError) else "failed"
        if self.rank != 0:
            self.end(status, text)
        if status == "timeout":
            self.end(status, self._absent_text(f"did not arrive within --timeout {self.timeout_s:g} s"))
        absent = self._absent()
        if absent:
            self.end("peer-lost", f"{self.where}: {_ranks(absent)} did not arrive; {text}")
        self._ending.acquire()  # the thread ends nothing more: the caller does
        self.deadline = None
        for conn in list(self.peers.values()):
            self._send(conn, "reporting")

    def end(self, status: str, text: str) -> None:
        """Reports (rank 0) or hands over (other ranks) the ending, then leaves the process."""
        self._ending.acquire()  # a second ending waits here until the first one's exit
        if self.stopped:  # the run ended on this rank first (stop)
            self._ending.release()
            return
        self.deadline = None
        try:
            if self.rank == 0:
                self._report(status, text)
            else:
                self._hand_over(status, text)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)

    def _close_ahead(self, status: str, text: str) -> None:
        """Rank 0: the result file closed with what it knows at once, before the news settles, and
        the other ranks told to leave the line to it. The launcher that saw a rank die may end this
        one before it reports (SIGTERM, and Open MPI's SIGKILL a quarter of a second later): the
        file then still says which rank was lost, and the standalone launch prints it."""
        if self.rank == 0 and self.reporter is not None:
            self.reporter.close_ahead(text, status)
            for conn in list(self.peers.values()):
                self._send(conn, "reporting")

    def _report(self, status: str, text: str) -> None:
        for conn in list(self.peers.values()):  # wait for me: the other ranks' grace grows
            self._send(conn, "reporting")
        kept = ""
        if self.reporter is not None:
            kept = f" ({self.reporter.fail(text, status, self._absent())})"
        click.echo(one_line(f"commbench: error: {text}{kept}"), err=True)
        sys.stderr.flush()
        for conn in list(self.peers.values()):
            self._send(conn, "done")

    def _hand_over(self, status: str, text: str) -> None:
        if not self.watched:
            # No channel: rank 0's own watchdog reports, and its exit (under mpirun) ends this rank first.
            time.sleep(GRACE_S)
            return
        with self._io:
            if self.up is not None:
                self._send(self.up, f"fail {self.rank} {status} {one_line(text)}")
            start = time.monotonic()
            until = start + GRACE_S
            # Until rank 0 has ended, not only reported: a rank that leaves first can make mpirun end
            # the job and drop what rank 0 still has to say (its line, its file, on a busy host).
            while self.up is not None and time.monotonic() < until:
                self._read_up(max(0.0, min(until - time.monotonic(), TICK_S)))
                if self.reported:
                    until = max(until, start + REPORTING_S)
        if not self.reported and self.rank == 1:  # rank 0 is stopped or gone: one rank speaks for it
            # With what this host's kernel resent, and to whom: a lossy link kept rank 0 from taking
            # its ranks' channels in (their connections still being retried), and no line named it.
            # This launch's connections on this host: those of this rank's parent (its daemon) and below.
            text += resent_text([os.getppid()])
            speak_for_rank_0(status, one_line(text))
            click.echo(one_line(f"commbench: error on rank 1: {text}"), err=True)


def _ranks(ranks: list[int]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"
