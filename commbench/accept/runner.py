"""One step at a time as its own process: in a session of its own, so that at its time limit the
whole of it (mpirun and its ranks) stops; its output in its log as it comes, so a stopped step keeps
what it said; in the environment without a launcher's variables, so that from a shell inside a job
(`srun --pty bash`, a task of `srun -N 100 commbench accept`) each step starts its own ranks instead
of taking itself for one rank of that launch."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Optional

from ..launch.backstop import STOP_WITHIN_S
from ..launch.relay import as_shown
from ..launch.startup import resent_text
from ..redact import scrub
from ..results.atomic import create_temporary

# After SIGTERM, how long a stopped step (mpirun passing it on to its ranks) may take to exit: longer
# than the step's own time to kill ranks deaf to it (STOP_WITHIN_S), or accept's SIGKILL came first
# and the step's launch folder stayed behind in $TMPDIR (1 run in 13 of a SIGHUP to accept).
STOP_GRACE_S = STOP_WITHIN_S + 5
# How long a step may go on after its ranks' first error line: they end within GRACE_S (3 s) of it, but
# mpirun waits for ever for the daemon of a host that stopped answering (its packets dropped), long
# after every rank of that host has ended.
OUTLIVES_ITS_LINE_S = 6.0
# How often the wait looks whether the step outlived its line.
LOOK_S = 0.25
# How long a step that outlived its line has from the SIGTERM to the SIGKILL.
OUTLIVED_STOP_S = 1.0
# Beyond the ranks' own start-up deadline (launch/startup.py), how long a launched step may go without
# rank 0's first line: the launcher's start of rank 0 (its daemon by ssh) and rank 0's imports and
# checks before its header. The ranks' deadline runs from their own start, and mpirun's start of the
# hosts before it had none: over a link losing 30 % of its packets, ssh alone took 12-30 s.
LAUNCH_S = 5.0


@dataclass(frozen=True)
class Ran:
    rc: Optional[int]  # None: stopped at its time limit, interrupted, or never started
    seconds: float
    log: str
    interrupted: bool = False  # stopped by Ctrl-C or SIGTERM to accept: the plan ends after this step
    unwritable: str = ""  # why its log or output file could not be written (a full disk): it did not run
    stopped: str = ""  # why a step was stopped before its time limit (rc None): its log's last error line says more


def run(argv: list, log: str, timeout_s: float, env: dict, stdout_file: Optional[str] = None,
        cwd: Optional[str] = None, starts_within_s: Optional[float] = None) -> Ran:
    """Runs argv, stdout and stderr into `log` (stdout into `stdout_file` where given: a JSON document
    to read back, there whole or not at all). What the step says is scrubbed line by line on its way
    into the log (redact.py's scrub): a library's warning may quote a credential-shaped setting that a
    result file redacts. A step whose log cannot be written is not started: nothing of it could be
    kept. `starts_within_s`: a launched step whose rank 0 said nothing on stdout by then (its header
    comes once MPI's start-up is done) is stopped, naming the hosts this host resent packets to."""
    t0 = time.monotonic()
    opened = []
    try:
        try:
            log_file = open(log, "w")
            opened.append(log_file)
            log_file.write(f"$ {scrub(shlex.join(argv))}\n")
            log_file.flush()
            stdout = subprocess.PIPE
            if stdout_file:
                stdout = open(create_temporary(os.path.dirname(stdout_file) or ".", os.path.basename(stdout_file)), "w")
                opened.append(stdout)
        except OSError as e:
            for f in opened:  # what holds nothing goes: no empty log stands for the step
                with contextlib.suppress(OSError):
                    os.unlink(f.name)
            return Ran(None, round(time.monotonic() - t0, 1), log,
                       unwritable=f"cannot write {e.filename or log}: {e.strerror or e}")
        return _run(argv, log_file, stdout, timeout_s, env, cwd, t0, log, starts_within_s)
    finally:
        for f in opened:  # a full disk refuses the last flush too: what was written stays
            with contextlib.suppress(OSError):
                f.close()
        if len(opened) == 2:
            _keep_whole(opened[1].name, stdout_file)


def _keep_whole(written: str, path: str) -> None:
    """The step's document under its name where it is whole JSON; otherwise (a step interrupted or
    stopped as it wrote it, or one that failed before it) nothing: an empty or cut file stood for the
    step's output."""
    try:
        with open(written) as f:
            json.load(f)
        os.replace(written, path)
    except (OSError, ValueError):
        with contextlib.suppress(OSError):
            os.unlink(written)


def _run(argv, log_file, stdout, timeout_s: float, env: dict, cwd, t0: float, log: str,
         starts_within_s: Optional[float]) -> Ran:
    try:
        proc = subprocess.Popen(argv, stdout=stdout, stderr=subprocess.PIPE, cwd=cwd, env=env, start_new_session=True)
    except OSError as e:  # the program is missing: this step fails, the others still run
        _say(log_file, f"cannot start it: {e}\n")
        return Ran(127, round(time.monotonic() - t0, 1), log)
    lock = threading.Lock()
    heard = _Heard()
    relays = [threading.Thread(target=_relay, args=(pipe, log_file, lock, heard, pipe is proc.stdout), daemon=True)
              for pipe in (proc.stdout, proc.stderr) if pipe is not None]
    for relay in relays:
        relay.start()
    interrupted, why = False, ""
    try:
        rc, why = _wait(proc, timeout_s, heard, None if starts_within_s is None or stdout is not subprocess.PIPE
                        else t0 + starts_within_s)
    except KeyboardInterrupt:  # the step is stopped whole; what it saved is judged
        rc, interrupted = None, True
    for relay in relays:  # the pipes close with the step's last process (a lost host's daemon keeps them)
        relay.join(OUTLIVED_STOP_S if why else STOP_GRACE_S)
    if why == _NOT_STARTED:  # the step's error line, as its ranks would have said one
        _say(log_file, f"commbench: error: the ranks had not started {starts_within_s:g} s after the launch (MPI's "
                       f"start-up is bounded by --timeout, the launcher's start of its hosts is not){heard.resent}\n")
    _say(log_file, "\nstopped by an interrupt\n" if interrupted else
         f"\nstopped {OUTLIVES_ITS_LINE_S:g} s after its error line: the launch waited on when its ranks had ended "
         f"(mpirun waits for ever for a host's daemon that no longer answers)\n" if why == _OUTLIVED else
         f"\nstopped {starts_within_s:g} s after the launch: its ranks had not started\n" if why == _NOT_STARTED else
         f"\nstopped at the time limit of {timeout_s:g} s\n" if rc is None else "")
    return Ran(rc, round(time.monotonic() - t0, 1), log, interrupted, stopped=why)


def _say(log_file, text: str) -> None:
    with contextlib.suppress(OSError):
        log_file.write(text)
        log_file.flush()


@dataclass
class _Heard:
    """What the relays heard, when: the ranks' first error line, the step's first line on stdout; and
    where the ranks never started, what the launch's connections had resent by then."""
    said: Optional[float] = None
    started: Optional[float] = None
    resent: str = ""


def _relay(pipe, log_file, lock: threading.Lock, heard: _Heard, stdout: bool) -> None:
    """The step's lines into its log as they come, scrubbed (until the log is closed: a step
    interrupted with Ctrl-C may still speak), noting in `heard` when the first came."""
    with pipe, contextlib.suppress(ValueError, OSError):
        for raw in iter(pipe.readline, b""):
            if stdout and heard.started is None:
                heard.started = time.monotonic()
            if heard.said is None and as_shown(raw).startswith(b"commbench: error"):
                heard.said = time.monotonic()
            with lock:
                log_file.write(scrub(raw.decode(errors="replace")))
                log_file.flush()


# Why _wait stopped a step before its time limit (Ran.stopped).
_OUTLIVED, _NOT_STARTED = "it outlived its ranks' error line", "its ranks had not started"


def _wait(proc: subprocess.Popen, timeout_s: float, heard: _Heard, start_by: Optional[float]) -> tuple[Optional[int], str]:
    """(the step's exit status, ''), or (None, why) where it was stopped: at its time limit (''),
    OUTLIVES_ITS_LINE_S after its ranks' error line, or at `start_by` with no word from its ranks."""
    until = time.monotonic() + timeout_s
    try:
        while True:
            now = time.monotonic()
            if heard.said is not None and now - heard.said > OUTLIVES_ITS_LINE_S:
                # Its ranks ended long ago: a SIGTERM only has mpirun wait for the lost daemon again.
                stop(proc, OUTLIVED_STOP_S)
                return None, _OUTLIVED
            if start_by is not None and now >= start_by and heard.started is None and heard.said is None:
                heard.resent = resent_text([proc.pid])  # while the launch's connections are still open
                stop(proc, OUTLIVED_STOP_S)
                return None, _NOT_STARTED
            if now >= until:
                raise subprocess.TimeoutExpired(proc.args, timeout_s)
            with contextlib.suppress(subprocess.TimeoutExpired):
                return proc.wait(timeout=min(LOOK_S, until - now)), ""
    except subprocess.TimeoutExpired:
        stop(proc)
        return None, ""
    except BaseException:  # Ctrl-C reaches the caller alone (the step has a session of its own)
        stop(proc)
        raise


def stop(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM to the step's process group (mpirun passes it on to its ranks), then, `grace_s` on,
    SIGKILL to what is left of it."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)


def last_line(log: str) -> str:
    """The step's last error line, else the last line it said, for the verdict's evidence: a sweep
    that fails midway still prints its fit and the name of its file after the error."""
    try:
        with open(log, errors="replace") as f:
            lines = [line.strip() for line in f if line.strip()]
    except OSError:
        return ""
    errors = [line for line in lines[1:] if line.startswith("commbench: error")]
    return errors[-1] if errors else lines[-1] if len(lines) > 1 else ""
