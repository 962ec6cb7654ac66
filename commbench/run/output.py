"""Rank 0's output of a run: what the loops, the commands' failure handling (cli/common.py) and the
watchdog (launch/watchdog.py) may ask of it, and the result-file side that every output shares. Every
output writes each row into its result file as it comes, so a run killed midway keeps what it
measured."""

from __future__ import annotations

import contextlib
import threading
from typing import Callable, Optional, Protocol, Sequence

from ..launch.events import announce_result
from ..results.document import ResultFile


class RunOutput(Protocol):
    current: str  # the step being measured, which a failure's message names
    file: ResultFile

    def finish(self) -> None:
        """Closes the result file of a complete run and prints the summary."""

    def refuse(self, reason: str) -> None:
        """Bad input found once the file existed."""

    def fail(self, error: str, status: str = "failed", absent: Sequence[int] = ()) -> str:
        """Closes the result file of a run that failed midway; returns what the error line says of it.
        `absent`: the ranks that died or stopped answering, as the watchdog knows them."""

    def summary(self) -> None:
        """The lines after the table: totals, findings, where the results are."""

    def close_ahead(self, error: str, status: str) -> None:
        """Closes the result file as `status` at once, ahead of the report (fail) that follows."""


class FileOutput:
    """The result-file half of a RunOutput; subclasses print."""

    def __init__(self, path: str, head: dict):
        self.current = ""
        self.file = ResultFile(path, head)
        announce_result(path)
        # The watchdog's thread may close the file while the main thread adds a row.
        self.writing = threading.Lock()
        # What a command keeps of a run that lost ranks midway, given them (links names their hosts).
        self.salvage: Optional[Callable[[Sequence[int]], None]] = None

    def attach(self, key: str, value) -> None:
        """Adds a section of the run's own (links, scale, numerics) to the file at once."""
        with self.writing:
            self.file.put(key, value)

    def finish(self) -> None:
        self.stop()
        self.file.finish()
        self.summary()

    def refuse(self, reason: str) -> None:
        """A file without rows is removed (it would only block a retry with the same --output), one
        with rows is kept as failed."""
        self.stop()
        # The refusal's own line is what the user needs; a file that cannot be tidied stays as it was.
        with contextlib.suppress(OSError):
            if self.file.has_rows():
                self.file.finish(f"bad input: {reason}")
            else:
                self.file.discard()

    def fail(self, error: str, status: str = "failed", absent: Sequence[int] = ()) -> str:
        """Status failed, timeout, peer-lost or interrupted. A failed write (the full disk that failed
        the run) leaves the last complete version."""
        self.stop()
        try:
            with self.writing:
                self.file.finish(error, status)
        except OSError as e:
            return f"{self.file.path} keeps the rows of its last complete write; closing it failed: {e.strerror}"
        if self.salvage is not None and absent:
            # After the close: a launcher that ends rank 0 meanwhile leaves the rows and the status.
            with contextlib.suppress(Exception):
                self.salvage(absent)
        return f"measured rows kept in {self.file.path}"

    def close_ahead(self, error: str, status: str) -> None:
        with contextlib.suppress(OSError), self.writing:  # the report that follows says why it could not
            self.file.finish(error, status)

    def stop(self) -> None:
        """Ends what the output shows while it runs (a progress bar)."""

    def summary(self) -> None:
        raise NotImplementedError
