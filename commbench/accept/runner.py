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


@dataclass(frozen=True)
class Ran:
    rc: Optional[int]  # None: stopped at its time limit, interrupted, or never started
    seconds: float
    log: str
    interrupted: bool = False  # stopped by Ctrl-C or SIGTERM to accept: the plan ends after this step
    unwritable: str = ""  # why its log or output file could not be written (a full disk): it did not run


def run(argv: list, log: str, timeout_s: float, env: dict, stdout_file: Optional[str] = None,
        cwd: Optional[str] = None) -> Ran:
    """Runs argv, stdout and stderr into `log` (stdout into `stdout_file` where given: a JSON document
    to read back, there whole or not at all). What the step says is scrubbed line by line on its way
    into the log (redact.py's scrub): a library's warning may quote a credential-shaped setting that a
    result file redacts. A step whose log cannot be written is not started: nothing of it could be
    kept."""
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
        return _run(argv, log_file, stdout, timeout_s, env, cwd, t0, log)
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


def _run(argv, log_file, stdout, timeout_s: float, env: dict, cwd, t0: float, log: str) -> Ran:
    try:
        proc = subprocess.Popen(argv, stdout=stdout, stderr=subprocess.PIPE, cwd=cwd, env=env, start_new_session=True)
    except OSError as e:  # the program is missing: this step fails, the others still run
        _say(log_file, f"cannot start it: {e}\n")
        return Ran(127, round(time.monotonic() - t0, 1), log)
    lock = threading.Lock()
    said: list[float] = []  # when the ranks' first error line came
    relays = [threading.Thread(target=_relay, args=(pipe, log_file, lock, said), daemon=True)
              for pipe in (proc.stdout, proc.stderr) if pipe is not None]
    for relay in relays:
        relay.start()
    interrupted = False
    try:
        rc = _wait(proc, timeout_s, said)
    except KeyboardInterrupt:  # the step is stopped whole; what it saved is judged
        rc, interrupted = None, True
    outlived = rc is None and not interrupted and bool(said) and time.monotonic() - t0 < timeout_s
    for relay in relays:  # the pipes close with the step's last process (a lost host's daemon keeps them)
        relay.join(OUTLIVED_STOP_S if outlived else STOP_GRACE_S)
    _say(log_file, "\nstopped by an interrupt\n" if interrupted else
         f"\nstopped {OUTLIVES_ITS_LINE_S:g} s after its error line: the launch waited on when its ranks had ended "
         f"(mpirun waits for ever for a host's daemon that no longer answers)\n" if outlived else
         f"\nstopped at the time limit of {timeout_s:g} s\n" if rc is None else "")
    return Ran(rc, round(time.monotonic() - t0, 1), log, interrupted)


def _say(log_file, text: str) -> None:
    with contextlib.suppress(OSError):
        log_file.write(text)
        log_file.flush()


def _relay(pipe, log_file, lock: threading.Lock, said: list) -> None:
    """The step's lines into its log as they come, scrubbed (until the log is closed: a step
    interrupted with Ctrl-C may still speak); the time of the first error line into `said`."""
    with pipe, contextlib.suppress(ValueError, OSError):
        for raw in iter(pipe.readline, b""):
            if not said and as_shown(raw).startswith(b"commbench: error"):
                said.append(time.monotonic())
            with lock:
                log_file.write(scrub(raw.decode(errors="replace")))
                log_file.flush()


def _wait(proc: subprocess.Popen, timeout_s: float, said: list) -> Optional[int]:
    """The step's exit status; None where it was stopped: at its time limit, or OUTLIVES_ITS_LINE_S
    after its ranks' error line."""
    until = time.monotonic() + timeout_s
    try:
        while True:
            now = time.monotonic()
            if said and now - said[0] > OUTLIVES_ITS_LINE_S:
                # Its ranks ended long ago: a SIGTERM only has mpirun wait for the lost daemon again.
                stop(proc, OUTLIVED_STOP_S)
                return None
            if now >= until:
                raise subprocess.TimeoutExpired(proc.args, timeout_s)
            with contextlib.suppress(subprocess.TimeoutExpired):
                return proc.wait(timeout=min(LOOK_S, until - now))
    except subprocess.TimeoutExpired:
        stop(proc)
        return None
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
