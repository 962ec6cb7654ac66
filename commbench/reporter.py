"""Rank 0's view of a run: the stdout table, warnings on stderr, the progress bar, the result file."""

from __future__ import annotations

import contextlib
import datetime
import os
import sys
import threading
from typing import Callable, Optional

import click

from . import machine, stragglers
from .formats import console as table
from .results import ResultFile, default_path
from .stats import FLAG_TEXT, sample_flags

# Set by the standalone parent when its own stderr is a terminal: the ranks' stderr is a pipe.
PROGRESS_MARK = "COMMBENCH_PROGRESS"


class Reporter:
    def __init__(self, meta: dict, output_path: Optional[str], total_steps: int, clock_floor_s: float,
                 fit: Optional[Callable[[dict], list[str]]] = None):
        self.meta = meta
        self.fit = fit  # result document -> fit lines printed after the table
        self.clock_floor_s = clock_floor_s
        self.warnings: list[str] = []
        self.current = ""  # the step being measured, named in a failure's message
        self.flagged: dict[tuple[str, str], list[tuple[str, dict]]] = {}  # (block, flag) -> sizes
        self.file = ResultFile(output_path or default_path(meta["config"]["op"]), meta)
        # The watchdog's thread may close the file while the main thread adds a row.
        self._writing = threading.Lock()
        for line in table.header(meta):
            click.echo(line)
        self._progress = None
        if sys.stderr.isatty() or os.environ.get(PROGRESS_MARK):
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
            console = Console(file=sys.stderr, force_terminal=True)
            self._progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                      TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                                      console=console, transient=True, redirect_stdout=False)
            self._task = self._progress.add_task("measuring", total=total_steps)
            self._progress.start()

    def note(self, text: str) -> None:
        click.echo(f"# note: {text}")

    def block(self, impl: str, description: str) -> None:
        for line in table.block_header(impl, description):
            click.echo(line)

    def step(self, label: str) -> None:
        self.current = label
        if self._progress is not None:
            self._progress.update(self._task, description=label)

    def add(self, record: dict, block: str, size_label: str) -> None:
        with self._writing:
            self.file.add(record)
            click.echo(table.row(record))
        for flag in sample_flags(record["samples_us"], self.clock_floor_s, record.get("window", 1)):
            self.flagged.setdefault((block, flag), []).append((size_label, record["time_us"]))
        if self._progress is not None:
            self._progress.advance(self._task)

    def warn(self, text: str) -> None:
        self.warnings.append(text)

    def finish(self) -> None:
        """Closes the result file of a complete run and prints the summary."""
        self._stop_progress()
        self.file.finish()
        self.summary()

    def refuse(self, reason: str) -> None:
        """Bad input found once the file existed: a file without rows is removed (it would only block
        a retry with the same --output), one with rows is kept as failed."""
        self._stop_progress()
        # The refusal's own line is what the user needs; a file that cannot be tidied stays as it was.
        with contextlib.suppress(OSError):
            if self.file.doc["results"]:
                self.file.finish(f"bad input: {reason}")
            else:
                self.file.discard()

    def fail(self, error: str, status: str = "failed") -> str:
        """Closes the result file of a run that failed midway (status: failed, timeout, peer-lost or
        interrupted); returns what the error line says about it. A failed write (the full disk that
        failed the run) leaves the last complete version."""
        self._stop_progress()
        try:
            with self._writing:
                self.file.finish(error, status)
        except OSError as e:
            return f"{self.file.path} keeps the rows of its last complete write; closing it failed: {e.strerror}"
        return f"measured rows kept in {self.file.path}"

    def _stop_progress(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def summary(self) -> None:
        wrong = sum(r["wrong"] for r in self.file.doc["results"])
        click.echo("#")
        click.echo(f"# wrong elements in total: {wrong} {'OK' if wrong == 0 else 'FAILED'}")
        if self.fit and self.file.doc["results"]:
            for line in self.fit(self.file.doc):
                click.echo(line)
        for line in stragglers.summary_lines(self.file.doc):
            click.echo(f"# {line}")
        click.echo(f"# results: {self.file.path}")
        for (block, flag), hits in self.flagged.items():
            what, remedy = FLAG_TEXT[flag]
            worst_size, t = max(hits, key=lambda h: h[1]["max"] / max(h[1]["median"], 1e-9))
            click.echo(f"warning: {block}: {what} at {', '.join(s for s, _ in hits)} (e.g. {worst_size}: "
                       f"min {t['min']:.2f} / median {t['median']:.2f} / p99 {t['p99']:.2f} / max "
                       f"{t['max']:.2f} us); remedy: {remedy}", err=True)
        for w in self.warnings:
            click.echo(f"warning: {w}", err=True)


def run_metadata(world, config: dict, argv: list[str]) -> dict:
    from .topo import snapshot
    topology = snapshot()
    return {
        "tool": machine.tool_info(),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "argv": argv,
        "config": config,
        "machine": machine.describe(world.hosts, world.size, world.launcher),
        "env": machine.recorded_env(),
        "topology": topology,  # rank 0's node
        "topology_fingerprint": topology["fingerprint"],
    }
