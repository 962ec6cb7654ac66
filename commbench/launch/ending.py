"""How a standalone launch ended, as data, and the command's last word on it.

Once mpirun and every rank ended, the command reads what the launch left into an Ending: its exit
status, the line that ended the run (relay.py), what the backstop ended (backstop.py), the signal the
command passed on, what the ranks told (events.py), mpirun's account of a rank a signal ended, and
the result file rank 0 made, read once (ResultFile). RULES, an ordered table, then decides: the first
rule whose predicate holds says the line (None: the ranks said theirs, or there is nothing to add)
and closes a result file that rank 0 left `running` with the status the rule names. docs/launching.md
lists the rules in this order; tests/test_ending.py has a case for each. A new way for a launch to end
is a rule and its case."""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Optional

from ..errors import one_line
from .relay import by_rank_0, held_back

# Where a line names a rank from mpirun's notice (relay.signalled_rank).
MPIRUNS_ACCOUNT = "(mpirun's account)"


@dataclass(frozen=True)
class Ending:
    """How the standalone launch ended: the command's exit status, the line that ended the run (None:
    no rank's error line), what launch/backstop.py says of the ranks it ended (None: it ended none),
    the signal the command passed on to the ranks where it was interrupted (None: it was not; the
    ranks say so), whether rank 0 ran at all, whether any rank did (events.GUARDED), the (status,
    text) rank 1 said for a rank 0 that did not report (None: it said nothing), the (rank, host,
    signal) of the first rank mpirun saw a signal end (relay.signalled_rank), and the result file rank
    0 made (None: it made none), -o's or the one it chose, and mpirun's notice of a signalled rank that
    came after rank 0's held-back line (relay.withheld_account); `mpirun_status`: mpirun's own exit
    status (every rank of this launch exits 0 where its run ended as it should: events.rank_status)."""
    status: int
    ending: Optional[bytes]
    stopped: Optional[str]
    interrupted: Optional[int]
    started: bool
    ran: bool
    spoken: Optional[tuple[str, str]]
    signalled: Optional[tuple[int, str, int]]
    result: Optional[str]
    withheld_account: Optional[str] = None
    mpirun_status: int = 0


# A result file's state as the ranks left it.
NONE, MISSING, UNREADABLE, RUNNING, COMPLETE, CLOSED = "none", "missing", "unreadable", "running", "complete", "closed"


@dataclass(frozen=True)
class ResultFile:
    """The result file rank 0 made, read once: its path (None: none was announced), its state, and the
    error of one that rank 0 closed on a failure (CLOSED)."""
    path: Optional[str]
    state: str
    error: Optional[str] = None

    @staticmethod
    def read(path: Optional[str]) -> "ResultFile":
        from ..results.document import left_as
        if path is None:
            return ResultFile(None, NONE)
        if not os.path.exists(path):
            return ResultFile(path, MISSING)
        doc = left_as(path)
        status = doc.get("status")
        if status is None:
            return ResultFile(path, UNREADABLE)
        if status in (RUNNING, COMPLETE):
            return ResultFile(path, status)
        return ResultFile(path, CLOSED, doc.get("error") if isinstance(doc.get("error"), str) else None)


class Facts:
    """An Ending with what the rules ask of it: the result file (read at the first rule that asks), and
    what the ending says of the ranks' end."""

    def __init__(self, e: Ending, output: Optional[str]):
        self.e, self.output = e, output
        # mpirun's notice of a rank ended by the signal the command passed on (SIGTERM to a rank not
        # yet holding a Ctrl-C), by its SIGKILL to ranks that did not end within STOP_WITHIN_S of it,
        # or by an abort on the way out (a gloo rank's SIGABRT as SIGTERM tore it down): the
        # interrupt's doing, no rank's fault
        self.signalled = None if e.interrupted is not None else e.signalled

    @cached_property
    def file(self) -> ResultFile:
        """Read where a rule first asks what the file holds (a host-level links file is large)."""
        return ResultFile.read(self.output)

    @property
    def no_file(self) -> bool:
        """No file to speak of: none announced, or none on disk (an unreadable one is one)."""
        return self.output is None or not os.path.exists(self.output)

    @property
    def after_the_watchdog(self) -> bool:
        """`commbench: terminated` (`aborted`) is the command's own signal, passed on, that rank 0 met
        once its watchdog had stopped (its last size measured): its file is left running, or was
        closed whole just before."""
        return self.e.interrupted is not None and held_back(self.e.ending) and not self.no_file

    @property
    def unsaid(self) -> bool:
        """The command interrupted, and no rank said more than that the signal ended it (its held-back
        `commbench: terminated`, in its set-up before its watchdog ran: the same interrupt, told as
        where the ranks ended on it before any handler of theirs)."""
        return self.e.interrupted is not None and (self.e.ending is None or held_back(self.e.ending))

    @property
    def early(self) -> bool:
        """The ranks ended before any of them could say why: a signal mpirun saw, or the interrupt."""
        return (self.signalled is not None and (self.e.ending is None or held_back(self.e.ending))) or self.unsaid

    @property
    def cause(self) -> str:
        """Why the ranks ended where no rank said why: a rank that a signal ended before any watchdog
        could name it (in the ranks' start-up, or after the run), as mpirun's notice above says; the
        command interrupted; or rank 0 killed."""
        if self.signalled is not None:
            rank, host, signum = self.signalled
            with contextlib.suppress(ValueError):
                signum = signal.Signals(signum).name
            return (f"rank {rank}'s process ended on signal {signum} on host {host} {MPIRUNS_ACCOUNT}, and the launch "
                    f"ended the others")
        if self.e.interrupted is not None:
            return f"the command was interrupted ({signal.Signals(self.e.interrupted).name})"
        return "rank 0's process was killed, or ended by the launch for another rank's"


@dataclass(frozen=True)
class Rule:
    """One way a launch ends: `when` it is this one, the `line` to say (given whether the file was
    closed), and the (error, status) to `close` a result file left running with. `needs_close`: the
    rule holds only where that close took (a file closed already falls to the next rule)."""
    name: str
    when: Callable[[Facts], bool]
    line: Callable[[Facts, bool], Optional[str]]
    close: Optional[Callable[[Facts], tuple[str, str]]] = None
    needs_close: bool = False


def _error(text: str) -> str:
    return f"commbench: error: {text}"


def _spoken_line(f: Facts, _kept: bool) -> Optional[str]:
    # Rank 1's line said it for a rank 0 stopped or gone: the file rank 0 left open says the same.
    # mpirun, which saw rank 0 die, may end rank 1 between its words and its line (SIGTERM, then
    # SIGKILL a quarter of a second later; seen once in a loaded test run): the line is said here.
    said = f.e.ending is not None and f.e.ending.startswith(b"commbench: error on rank 1:")
    return None if said else one_line(f"commbench: error on rank 1: {f.e.spoken[1]}")


def _mpirun_ended(f: Facts, _kept: bool) -> str:
    # Rank 0 closed the file whole and every rank ended as it should, but mpirun failed of its own (a
    # SIGTERM or SIGINT to mpirun itself near the run's end: it exits 1, no rank's notice; a SIGKILL to
    # it: Popen's status is minus the signal's number).
    s = f.e.mpirun_status
    how = f"on signal {signal.Signals(-s).name}" if s < 0 else f"with status {s}"
    return _error(f"the run was complete ({f.output} holds all of it), but then mpirun ended {how}, no rank's failure")


RULES: tuple[Rule, ...] = (
    Rule("success", lambda f: f.e.status == 0, lambda f, kept: None),
    # Rank 0 spoke, and closed its file, or said why it could not (a full disk); but `commbench:
    # terminated` is the launch's SIGTERM that reached it before its watchdog ran, after a rank that a
    # signal ended there: its file is left running, and the cause is told below.
    Rule("ranks-said-it",
         lambda f: by_rank_0(f.e.ending) and not (f.early and (f.no_file or f.file.state == RUNNING))
         and not f.after_the_watchdog,
         lambda f, kept: None),
    Rule("backstop-stopped", lambda f: bool(f.e.stopped),
         lambda f, kept: _error(f.e.stopped) + (f" (measured rows kept in {f.output})" if kept else ""),
         close=lambda f: (f.e.stopped, "timeout")),
    Rule("rank-1-spoke", lambda f: f.e.spoken is not None, _spoken_line,
         close=lambda f: (f.e.spoken[1], f.e.spoken[0])),
    Rule("left-open", lambda f: f.output is not None,
         lambda f, kept: _error(f"the ranks ended with {f.output} still open: {f.cause} (measured rows kept)"),
         close=lambda f: (f"the ranks ended (status {f.e.status}) with this file still open: {f.cause}; the rows "
                          f"measured before are kept", "interrupted" if f.signalled is None and f.e.interrupted
                          else "peer-lost"),
         needs_close=True),
    Rule("ended-before-the-file", lambda f: f.early and f.no_file,
         lambda f, kept: _error(f"the ranks ended before any result was written: {f.cause}")),
    # Rank 0 closed the file ahead of its line (watchdog._close_ahead), and the launch ended it before
    # it spoke: SIGTERM, then Open MPI's SIGKILL a quarter of a second later.
    Rule("closed-ahead", lambda f: f.e.ending is None and bool(f.file.error),
         lambda f, kept: one_line(_error(f"{f.file.error} (measured rows kept in {f.output})"))),
    # Rank 0 closed the file whole, and then a rank ended on a signal (in MPI's finalize), or the
    # command was interrupted: the rows stand, the status says the ranks' end.
    Rule("complete-then-signalled", lambda f: f.early and f.file.state == COMPLETE,
         lambda f, kept: _error(f"the run was complete ({f.output} holds all of it), but then {f.cause}")),
    Rule("complete-then-mpirun-failed",
         lambda f: f.e.ending is None and bool(f.e.mpirun_status) and f.file.state == COMPLETE, _mpirun_ended),
    # A rank killed in its start-up, before mpirun knew it for one of the job's (no notice).
    Rule("killed-in-start-up",
         lambda f: f.e.ending is None and f.no_file and not f.e.interrupted and (f.e.started or f.e.ran),
         lambda f, kept: _error(f"the ranks ended before any result was written (launch status {f.e.status}): a "
                                f"rank's process ended as the ranks started, and mpirun gave no account of which")),
    Rule("mpirun-failed-before-any-rank", lambda f: not f.e.started and not f.e.interrupted,
         lambda f, kept: _error(f"the launch ended with status {f.e.status} before any rank ran (mpirun's account "
                                f"above)")),
    Rule("nothing-to-add", lambda f: True, lambda f, kept: None),
)


def decide(e: Ending, output: Optional[str]) -> tuple[Rule, Optional[str]]:
    """The rule that holds for the ending and its line, the result file that rank 0 left open closed
    as the rule says. Rank 0 that spoke has closed the file, or said why it could not (a full disk)."""
    from ..results.document import close_abandoned
    if e.status != 0 and output is not None:  # a rank 0 killed while it rewrote the file left this
        from ..results.atomic import leftovers
        for path in leftovers(output):
            with contextlib.suppress(OSError):
                os.unlink(path)
    f = Facts(e, output)
    for rule in RULES:
        if not rule.when(f):
            continue
        kept = False
        if rule.close is not None and output is not None:
            error, status = rule.close(f)
            kept = close_abandoned(output, error, status)
        if rule.needs_close and not kept:
            continue
        return rule, rule.line(f, kept)
    raise AssertionError("the last rule holds for every ending")  # nothing-to-add


def last_word(e: Ending, output: Optional[str]) -> Optional[str]:
    """The standalone launch's last word, where the ranks could not say theirs (decide's line)."""
    return decide(e, output)[1]


def said(e: Ending) -> tuple[Optional[str], Optional[str]]:
    """(what comes before the line, the line) the command says once the ranks ended: its last word,
    or else rank 0's `commbench: terminated` that the relay held back; mpirun's account of a signalled
    rank that came after that line goes before a line that names it."""
    line = last_word(e, e.result)
    if line is None and held_back(e.ending):
        line = e.ending.decode(errors="replace")
    preface = e.withheld_account if line is not None and MPIRUNS_ACCOUNT in line and e.withheld_account else None
    return preface, line
