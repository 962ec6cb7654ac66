"""Rank 0's view of a run: the stdout table, warnings on stderr, the progress bar, the result file."""

from __future__ import annotations

import os
import sys
from typing import Callable, Optional

import click

from ..analysis import nccl_default, stragglers
from ..formats import console as table
from ..node import machine
from ..results import physical
from ..results.document import default_path, header
from ..results.record import Record
from ..results.stats import flag_lines, record_flags
from .output import FileOutput

# Set by the standalone parent when its own stderr is a terminal: the ranks' stderr is a pipe.
PROGRESS_MARK = "COMMBENCH_PROGRESS"


class Reporter(FileOutput):
    """The output of the timing sweeps: a table row per record on stdout as it is measured, a progress
    bar on a terminal, warnings on stderr at the end."""

    def __init__(self, meta: dict, output_path: Optional[str], total_steps: int, clock_floor_s: float,
                 fit: Optional[Callable[[dict], list[str]]] = None):
        super().__init__(output_path or default_path(meta["config"]["op"]), meta)
        self.meta = meta
        self.fit = fit  # result document -> fit lines printed after the table
        self.clock_floor_s = clock_floor_s
        # The slowest memory of the run's GPUs (each rank's, or the ones a command of one process drives).
        gbps = [g.get("memory_gbps") for g in meta["config"].get("gpus", [])]
        self.memory_gbps = min(gbps) if gbps and all(gbps) else None
        self.warnings: list[str] = []
        self.flagged: dict[tuple[str, str], list[tuple[str, dict]]] = {}  # (block, flag) -> sizes
        # --place both: a size's out-of-place record waits for its in-place one, to share its row.
        self.paired = meta["config"].get("place") == "both"
        self.waiting: Optional[dict] = None
        self.choice = False  # the current block has the algo/proto column (console.shows_choice)
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

    @property
    def records(self) -> list[dict]:
        """The rows measured so far, as the result file holds them."""
        return self.file.doc["results"]

    def note(self, text: str) -> None:
        click.echo(f"# note: {text}")

    def block(self, label: str, description: str, impl: Optional[str] = None) -> None:
        """A block's header: `label` names it; `impl`, where given, decides the algo/proto column."""
        # A collective's loop gives the slowest rank's time beside the ranks' average; a pair's figure
        # is its slower side already.
        cfg = self.meta["config"]
        loop = cfg["policy"].get("timing") == "loop" and cfg["op"] not in ("p2p", "copy")
        self.choice = impl is not None and table.shows_choice(self.meta, impl)
        for line in table.block_header(label, description, loop=loop, paired=self.paired, choice=self.choice,
                                       overlap=table.shows_overlap(self.meta)):
            click.echo(line)

    def step(self, label: str) -> None:
        self.current = label
        if self._progress is not None:
            self._progress.update(self._task, description=label)

    def add(self, rec: Record, block: str, size_label: str) -> None:
        self.add_rows([(rec, block, size_label)])

    def add_rows(self, rows: list[tuple[Record, str, str]], show: bool = True) -> None:
        """(record, block, size label) rows written in one rewrite of the file; `show`: a table row
        each on stdout too (host-level links keeps its thousands of flows to the file)."""
        records = [rec.as_dict() for rec, _, _ in rows]
        with self.writing:
            self.file.add(*records)
            for record in records if show else ():
                if not self.paired:
                    click.echo(table.row(record, choice=self.choice))
                elif record["in_place"]:
                    click.echo(table.paired_row(self.waiting, record, choice=self.choice))
                    self.waiting = None
                else:
                    self.waiting = record
        for record, (_, block, size_label) in zip(records, rows):
            for flag in record_flags(record, self.clock_floor_s):
                self.flagged.setdefault((block, flag), []).append((size_label, record["time_us"]))
        if self._progress is not None:
            self._progress.advance(self._task, len(rows))
        for record in records:  # written first: the file keeps the row that failed
            physical.check(record, self.memory_gbps)

    def warn(self, text: str) -> None:
        self.warnings.append(text)

    def stop(self) -> None:
        if self.waiting is not None:  # a run that ended between a size's two placements
            click.echo(table.paired_row(self.waiting, None, choice=self.choice))
            self.waiting = None
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
        for line in stragglers.summary_lines(self.file.doc) + stragglers.median_rank_lines(self.file.doc):
            click.echo(f"# {line}")
        for line in nccl_default.summary_lines(self.file.doc):
            click.echo(f"# {line}")
        for name, said in self.file.doc.get("nccl_refused", {}).items():
            click.echo(f"# {name}: NCCL refuses it: {said}")
        channels = self.file.doc.get("nccl_channels")
        if channels:
            click.echo(f"# NCCL's channels: {channels['coll']} for collectives, {channels['p2p']} for point-to-point, "
                       f"{channels['p2p_per_peer']} to each peer")
        if self.file.doc.get("nccl_transports"):
            click.echo("# NCCL's transports (connections): " +
                       ", ".join(f"{name} {n}" for name, n in self.file.doc["nccl_transports"].items()))
        click.echo(f"# results: {self.file.path}")
        for line in flag_lines(self.flagged):
            click.echo(f"warning: {line}", err=True)
        for w in self.warnings:
            click.echo(f"warning: {w}", err=True)


def run_metadata(world, config: dict, argv: list[str]) -> dict:
    from ..node.topo import snapshot
    topology = snapshot(nccl=config.get("device") != "cpu")
    return header(argv, config, machine.describe(world.hosts, world.size, world.launcher), machine.recorded_env(),
                  topology=topology,  # rank 0's node
                  topology_fingerprint=topology["fingerprint"])
