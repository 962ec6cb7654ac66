"""The standalone launch's stderr: what the ranks and the bundled mpirun write, passed on as it
comes, until commbench's own line that ends a run; its stdout, passed on whether or not its reader
stays (pass_on, ReaderMayLeave, std_streams). What follows it is mpirun's account of the same
ending (a banner naming the rank that exited, MPI_ABORT's boilerplate), which would bury the one
line a user reads; a launch that fails before any rank speaks passes on everything mpirun says.
Rank 0's `commbench: terminated` (or `aborted`, a Ctrl-C's) is held back (held_back): it may be the
launch's SIGTERM after a rank that a signal ended, or the command's interrupt passed on where no
watchdog held it, which the command tells in a line of its own once the ranks ended."""

from __future__ import annotations

import os
import re
import threading
from typing import BinaryIO, Optional

from ..redact import scrub

# Terminal control sequences (the progress bar redraws its line with them).
_CONTROL = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")
# The lines of a process that a signal ended where no handler of a run held it (cli.main, __main__).
_SIGNALS_ENDING = (b"commbench: terminated", b"commbench: aborted")
_ENDING = (b"commbench: error", *_SIGNALS_ENDING)
# The most of a line kept to tell whether it is the ending one (an error line is one line, and short).
_LONGEST = 1 << 16


def held_back(ending: Optional[bytes]) -> bool:
    """Whether the line that ended the run was not passed on: the command says it, or its own."""
    return ending is not None and ending.startswith(_SIGNALS_ENDING)


def as_shown(line: bytes) -> bytes:
    """The line as a terminal shows it: its last carriage-return segment, without control sequences
    and NUL bytes (mpirun's forwarding at times puts one before a rank's line: a rank's error line read
    as no ending, and the command added its own: seen once, a failed kernel launch in a loaded run),
    nor the blank that Open MPI's abort message leaves before the next line of the same rank."""
    return _CONTROL.sub(b"", line.rstrip(b"\r\n").rsplit(b"\r", 1)[-1]).replace(b"\0", b"").lstrip(b" \t")


def _ends_the_run(line: bytes) -> bool:
    """Whether the line, as a terminal shows it, is commbench's line that ends a run."""
    return as_shown(line).startswith(_ENDING)


class Relay(threading.Thread):
    """The relaying thread; `ending` is the line that ended the run once one did (None before).
    `muted`: nothing more is passed on (the launch ended the ranks and says why itself, after
    mpirun's account of the ranks it ended). `seen`: the last of what it read, passed on or not;
    `withheld`: what came after a held-back ending, not passed on (withheld_account)."""
    ending: Optional[bytes] = None
    muted = False
    seen = b""
    withheld = b""


# How much of the relayed text is kept for signalled_rank.
_SEEN = 8192
# The bundled mpirun's (PRRTE's) notice of a rank that a signal ended: "prterun noticed that process
# rank 1 with PID 30561 on node vm exited on\nsignal 9 (Killed)."
_SIGNALLED = re.compile(rb"process rank (\d+) with PID \d+ on node (\S+) exited on\s+signal (\d+)")


# One of mpirun's notices: its text between two rules of dashes.
_BOX = re.compile(rb"-{20,}\n(?:(?!-{20,}\n).*\n)*?-{20,}\n")


def withheld_account(withheld: bytes) -> Optional[str]:
    """mpirun's notice of a rank that a signal ended, whole, where it came after a held-back ending
    (and was not passed on): the command shows it above its own line that names that rank, as where
    it came first."""
    for box in _BOX.finditer(withheld):
        if _SIGNALLED.search(box.group(0)):
            return box.group(0).decode(errors="replace")
    return None


def signalled_rank(seen: bytes) -> Optional[tuple[int, str, int]]:
    """(rank, host, signal) of the first rank that mpirun says a signal ended, in `seen`."""
    m = _SIGNALLED.search(seen)
    return (int(m.group(1)), m.group(2).decode(errors="replace"), int(m.group(3))) if m else None


def to_nowhere(fd: int) -> None:
    """What goes to `fd` from now on goes to /dev/null: its reader left (`| head`) or its terminal
    closed, and the command runs on to its own end and exit status, as if every line had been read."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    if devnull != fd:  # a closed fd is the lowest free one: os.open gave it
        os.dup2(devnull, fd)
        os.close(devnull)


def _write(sink: BinaryIO, data: bytes) -> None:
    """Relays `data`; a sink that fails (its reader left, or a full device: /dev/full) gets nothing
    more, and the run goes on: the result file has what it measured."""
    try:
        sink.write(data)
        sink.flush()
    except OSError:
        to_nowhere(sink.fileno())  # what is still buffered goes there with the next flush


def std_streams(stdout, stderr) -> tuple:
    """sys.stdout and sys.stderr for the command line: one that was closed when the command started
    (`>&-`, `2>&-`: Python's is None, and the first write or isatty() failed the run, exit 1 without
    a word) goes to /dev/null; stdout is ReaderMayLeave; both Scrubbing."""
    def opened(stream, fd: int):
        if stream is None:
            to_nowhere(fd)
            stream = open(fd, "w", closefd=False)
        return stream
    return ReaderMayLeave(Scrubbing(opened(stdout, 1))), Scrubbing(opened(stderr, 2))


class Scrubbing:
    """A text stream whose writes are scrubbed (redact.scrub): what commbench prints quotes what the
    user gave it (paths, a launch command, host names), and a credential in any of it goes no further.
    A write is a line or more (click.echo's), or a progress bar's redraw."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(scrub(text))
        return len(text)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


class ReaderMayLeave:
    """sys.stdout of the command line: a reader that leaves early (`commbench compare A B | head`)
    sends the rest to /dev/null, where click would exit 1 (compare's status for a regression) and a
    launch's mpirun would end the job ("prterun: SIGPIPE detected - aborting")."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            to_nowhere(self._stream.fileno())
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            to_nowhere(self._stream.fileno())
            self._stream.flush()

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


class _Scrubbed:
    """A sink that gets what is relayed with its credentials redacted (redact.scrub): a library's
    message may quote a setting it was given (UCX_NET_DEVICES=..., Open MPI's btl_tcp_if_include=...).
    Scrubbed a line at a time, a line ending at a line break or a carriage return (the progress bar
    redraws its line); the rest of a line not yet ended is held until it ends (or passes _LONGEST),
    and passed on by flush() at the end."""

    def __init__(self, sink: BinaryIO):
        self.sink, self.held = sink, b""

    def write(self, data: bytes) -> None:
        data = self.held + data
        cut = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
        if len(data) - cut > _LONGEST:
            cut = len(data)
        self.held = data[cut:]
        if cut:
            _write(self.sink, _scrub(data[:cut]))

    def flush(self) -> None:
        if self.held:
            _write(self.sink, _scrub(self.held))
            self.held = b""


def _scrub(data: bytes) -> bytes:
    return scrub(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")


def pass_on(source: int, sink: BinaryIO) -> threading.Thread:
    """Relays the ranks' stdout (the pipe `source`) to `sink` on a thread of its own, read to the end
    whether or not the sink's reader stays: mpirun never meets a closed pipe."""
    def run() -> None:
        out = _Scrubbed(sink)
        while chunk := os.read(source, 65536):
            out.write(chunk)
        out.flush()
        os.close(source)

    thread = threading.Thread(target=run, name="commbench-stdout", daemon=True)
    thread.start()
    return thread


def start(source: int, sink: BinaryIO) -> Relay:
    """Relays the pipe `source` to `sink` on a thread of its own (joined once the pipe ends). Bytes
    go on as they arrive, not a line at a time: the progress bar never ends its line."""
    def run() -> None:
        line, ended = b"", False
        out = _Scrubbed(sink)
        while chunk := os.read(source, 65536):
            thread.seen = (thread.seen + chunk)[-_SEEN:]
            if ended or thread.muted:
                if ended and held_back(thread.ending):
                    thread.withheld = (thread.withheld + chunk)[:_SEEN]
                continue  # read to the end all the same, so that no writer blocks on a full pipe
            shown = chunk
            while b"\n" in chunk:
                head, _, chunk = chunk.partition(b"\n")
                if _ends_the_run(line + head):
                    thread.ending = as_shown(line + head)
                    # Up to this line's end, nothing after; a held-back line's bytes not either.
                    shown = shown[:len(shown) - len(chunk) - (len(head) + 1 if held_back(thread.ending) else 0)]
                    if held_back(thread.ending):
                        thread.withheld = chunk[:_SEEN]
                    ended = True
                    break
                line = b""
            if not ended:  # the line so far, as a terminal shows it: after its last carriage return
                line = (line + chunk).rsplit(b"\r", 1)[-1][-_LONGEST:]
            # Without mpirun's NUL bytes, which a terminal does not show: one before a rank's error
            # line kept the line from starting with `commbench: error` for a reader of the stream.
            out.write(shown.replace(b"\0", b""))
        out.flush()
        os.close(source)

    thread = Relay(target=run, name="commbench-stderr", daemon=True)
    thread.start()
    return thread


def by_rank_0(line: Optional[bytes]) -> bool:
    """Whether an ending line is rank 0's own: the others' say 'commbench: error on rank N'."""
    return line is not None and not line.startswith(b"commbench: error on rank")
