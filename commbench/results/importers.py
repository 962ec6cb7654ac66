"""Other tools' outputs as commbench result files, so existing logs can be fitted, compared and
plotted: nccl-tests (its stdout table, or its -J JSON) and the OSU micro-benchmarks (stdout).

Those tools report one figure per size (an average), not per-iteration samples, so each imported
record has that one figure as its only sample; the fit's confidence intervals are then degenerate.
nccl-tests 2.19's -J JSON of a run with -I 1 is the exception: each iteration's time is a sample, and
with several processes each process's own times make the record's per_rank figures (per process).

Three rules hold:
- a file that is not the tool's output is given up early: unless one of its first
  UNRECOGNISED_LIMIT lines is the tool's, nothing more of it is read, and reading stops at the first
  UNRECOGNISED_LIMIT lines in a row that are not (a long log with a few of the tool's lines in it);
  nccl-tests' -J JSON, one document, is read whole up to MAX_JSON characters;
- a figure that is not a number (nan, inf, N/A) never reaches a result file: its row is left out,
  with a warning;
- a nccl-tests log that ends before its closing "Avg bus bandwidth" line (a run cut short) is
  imported as a failed run, marked truncated, with a warning.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Optional, TextIO

import numpy as np

from .. import __version__, collectives
from ..errors import CommbenchError
from ..node.gpu import CUDA_EVENT_RESOLUTION_S
from ..redact import scrub
from ..sizes import MAX_SIZES, format_size
from . import arrival
from .document import FIGURE_RANGES, NCCL_TESTS_PER_ITERATION, header, new_document
from .record import measured, single
from .series import variant

UNRECOGNISED_LIMIT = 50
# Longest line read at once: a file without line breaks (a binary) is read in pieces of this size,
# so that it too is given up after UNRECOGNISED_LIMIT of them.
MAX_LINE = 1 << 16
# Largest -J JSON read: nccl-tests writes a few hundred bytes per size, so a larger "JSON" file is
# not its output, and reading it whole would take as long as the disk and memory allow.
MAX_JSON = 64 << 20
# Largest log read (a regular file's size, refused before reading): nccl-tests prints about 150 bytes
# a size, so 10,000 sizes are 1.5 MB; a 200 MB log took 45 s to be refused at its count of rows.
MAX_LOG = 64 << 20

# nccl-tests binary (<name>_perf) -> commbench's op: the collective that has <name> as its name or
# one of its aliases, so that a new collective module is imported with no change here.
NCCL_TESTS_OPS = {spelling: c.name for c in collectives.all_collectives() for spelling in (c.name, *c.aliases)}
# nccl-tests binaries of collectives commbench does not measure
NCCL_TESTS_REFUSED = ("hypercube",)
# sendrecv_perf prints the reduction it was given (--op, default sum) though it reduces nothing.
PRINTS_REDOP = {"sendrecv"}
# nccl-tests type name -> (commbench dtype, bytes per element)
NCCL_TYPES = {"int8": ("int8", 1), "uint8": ("uint8", 1), "int32": ("int32", 4), "uint32": ("uint32", 4),
              "int64": ("int64", 8), "uint64": ("uint64", 8), "half": ("float16", 2), "float": ("float32", 4),
              "double": ("float64", 8), "bfloat16": ("bfloat16", 2), "f8e4m3": ("float8_e4m3", 1),
              "f8e5m2": ("float8_e5m2", 1)}
# What a printed figure may be, whatever its unit (us, GB/s, MB/s): the widest of a result file's
# ranges (results/document.py's FIGURE_RANGES), each record's own checked when the file is written.
IMPORTED_RANGE = (min(lo for lo, _ in FIGURE_RANGES.values()), max(hi for _, hi in FIGURE_RANGES.values()))
# A row's two halves are NCCL's call out of place and in place: impl nccl, told apart by in_place.
NCCL_IMPL = "nccl"
NCCL_PLACEMENTS = (False, True)  # in_place of the out-of-place and the in-place half of a row


@dataclass
class Imported:
    """A result document, and the warning lines to print once it is written."""
    doc: dict
    warnings: list[str] = field(default_factory=list)


def _lines(stream: TextIO) -> Iterator[str]:
    return iter(lambda: stream.readline(MAX_LINE), "")


class _Tail:
    """Lines read from a stream, the last one as read (its line end or none) kept."""

    def __init__(self, lines: Iterable[str]):
        self.lines, self.last = lines, ""

    def __iter__(self) -> Iterator[str]:
        for line in self.lines:
            self.last = line
            yield line


def _tool_lines(lines: Iterable[str], recognised, tool: str, source: str) -> list[str]:
    """The lines up to the first UNRECOGNISED_LIMIT in a row that are not the tool's: where its
    output ends in a longer log, whose rest is not read. Refused when the file opens with such a run."""
    kept: list[str] = []
    unrecognised = 0
    for line in lines:
        line = line.rstrip("\n")
        unrecognised = 0 if recognised(line) else unrecognised + 1
        kept.append(line)
        if unrecognised == UNRECOGNISED_LIMIT:
            break
    if not any(kept):  # an empty file (blank lines at most), or a FIFO that no one writes to
        raise CommbenchError(f"{source} is empty: no {tool} output in it")
    if unrecognised == len(kept):
        raise CommbenchError(f"{source} is not {tool} output: none of its first {len(kept)} lines is")
    return kept


def _figure(value, source: str, context: str) -> Optional[float]:
    """A printed figure as a finite number; None for one the tool could not give (nan, inf, N/A or
    null in JSON). Anything else that is not a number refuses the log."""
    if value is None or (isinstance(value, str) and value.strip().upper() == "N/A"):
        return None
    if isinstance(value, bool):  # JSON's true is no time, though Python counts it as 1
        raise CommbenchError(f"{source}: cannot read {json.dumps(value)} as a number in: {context}")
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise CommbenchError(f"{source}: cannot read {value!r} as a number in: {context}") from None
    if math.isfinite(x) and (abs(x) > IMPORTED_RANGE[1] or 0 < abs(x) < IMPORTED_RANGE[0]):
        # Refused before any arithmetic on it overflows (a median of 1e308 us times).
        raise CommbenchError(f"{source}: {value} is no measured figure (0, or {IMPORTED_RANGE[0]:g} to "
                             f"{IMPORTED_RANGE[1]:g}) in: {context}")
    return x if math.isfinite(x) else None


def _room_for_a_row(rows: list, source: str) -> None:
    """A log holds at most the MAX_SIZES rows a sweep may measure: reading stops at the next one."""
    if len(rows) >= MAX_SIZES:
        raise CommbenchError(f"{source}: more than {MAX_SIZES} result rows, the most sizes a sweep may have; "
                             f"split the log")


class _LeftOut:
    """Rows left out, grouped by reason, for one warning line per reason."""

    def __init__(self, source: str):
        self.source = source
        self.sizes: dict[str, list[int]] = {}

    def add(self, reason: str, size: int) -> None:
        self.sizes.setdefault(reason, []).append(size)

    def warnings(self) -> list[str]:
        return [f"{self.source}: left out {len(sizes)} row(s) at {', '.join(format_size(s) for s in sizes)}: {reason}"
                for reason, sizes in self.sizes.items()]


def _place(records: list[dict]) -> str:
    """config.place of imported records: nccl-tests' rows give both placements (unless a log's halves
    were all left out), OSU's the one it measures."""
    found = {bool(r.get("in_place")) for r in records}
    return "both" if len(found) == 2 else "in" if True in found else "out"


def _document(tool: str, source: str, op: str, ranks: int, records: list[dict], hosts: list[str],
              extra_machine: Optional[dict] = None, truncated: Optional[str] = None,
              timing: Optional[str] = None) -> dict:
    if not records:
        raise CommbenchError(f"{source}: no result rows found in this {tool} output")
    impls = list(dict.fromkeys(r["impl"] for r in records))
    head = header(
        ["commbench", "import", tool, source],
        {"op": op if op in collectives.names() else "p2p",
                   "impls": impls, "sizes": sorted({r["size_bytes"] for r in records}),
                   "dtype": records[0]["dtype"], "redop": records[0]["redop"], "place": _place(records),
                   "policy": {"imported_from": tool, **({"timing": timing} if timing else {})}},
        # The log's own words (host and GPU names) are scrubbed by header(), as a run's environment is.
        {"hosts": hosts or ["unknown"], "ranks": ranks, "launcher": "mpi",
         "cpu_model": "unknown", "cores": 1, "memory_bytes": 0, "os": "unknown", "python": "unknown",
         "torch": "unknown", "mpi": None, **(extra_machine or {})},
        tool={"name": "commbench", "version": __version__, "git_commit": None},
        imported={"tool": tool, "source": source, "truncated": truncated is not None})
    return new_document(head, records, "failed" if truncated else "complete", truncated)


# ---- nccl-tests ----------------------------------------------------------------------------------

@dataclass
class _PerIter:
    """One half's -I 1 figures (nccl-tests 2.19, util.cu's writePerIterReport): each iteration's time
    in us, the maximum over every GPU of every process; the first `skipped` (-K) are left out of its
    statistics; with several processes, each process's own times (the maximum over its GPUs)."""
    times: list
    skipped: int
    per_process: Optional[list]


@dataclass
class _Row:
    """One size of a nccl-tests table (or -J result), its figures as printed."""
    size: int
    count: int
    type: str
    redop: str
    root: int
    # (in_place, time, #wrong, _PerIter or None) per placement; None where the log has no such half
    halves: list
    context: str  # the line, for messages


@dataclass
class _Run:
    binary: Optional[str] = None  # "all_gather" of all_gather_perf, when the log names it
    ranks: dict = field(default_factory=dict)  # rank -> (host, GPU name)
    rows: list = field(default_factory=list)
    complete: bool = False
    warnings: list = field(default_factory=list)  # what the reader is told beside the rows left out
    ranks_per_process: int = 1  # -t threads x -g GPUs: a process drives that many ranks
    # Ranks in all where the device lines list fewer: a -J file lists each process's first GPU only
    # (util.cu keeps the first '#  Rank' line of each process's block), so a -g 8 process is one entry.
    rank_count: Optional[int] = None


_RANK = re.compile(r"#\s+Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s+(.*)$")
_BINARY = re.compile(r"\b(\w+)_perf\b")
_STARTING = re.compile(r"#\s*Collective test starting:\s*(\w+)_perf")
_ROW = re.compile(r"\s*\d+\s+\d+\s+\S+\s+\S+\s+-?\d+\s")
_NCCL_TESTS_LINE = re.compile(r"#\s*(nccl-tests version|Collective test|nThread|Using devices|Rank\s+\d|size\s+count|"
                              r"\(B\)|Out of bounds|Avg bus bandwidth)|.*\bNCCL (INFO|WARN)\b")
# srun --label and similar wrappers put "<task>: " before every line.
_LABEL = re.compile(r"^\s*\d+: ")
# The table's columns when no header line says otherwise (nccl-tests without per-iteration columns).
_DEFAULT_COLUMNS = ["size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                    "time", "algbw", "busbw", "#wrong"]


def _recognised(line: str) -> bool:
    line = _LABEL.sub("", line, count=1)
    return bool(_NCCL_TESTS_LINE.match(line) or _ROW.match(line))


def import_nccl_tests(stream: TextIO, source: str, op: Optional[str] = None) -> Imported:
    """nccl-tests output: the JSON of -J when the file is JSON, else the stdout table. The collective
    is the one the log names (its binary); `op` is the fallback for a log that does not."""
    first = stream.readline(MAX_LINE)
    if first.lstrip().startswith("{"):
        text = first + stream.read(max(0, MAX_JSON + 1 - len(first)))  # one more than allowed tells
        if len(text) > MAX_JSON:
            raise CommbenchError(f"{source}: not the JSON of nccl-tests -J: larger than "
                                 f"{format_size(MAX_JSON)} characters")
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise CommbenchError(f"{source}: truncated or broken nccl-tests JSON ({e})") from None
        run = _nccl_tests_json(doc, source)
    else:
        lines = _tool_lines(itertools.chain([first], _lines(stream)), _recognised, "nccl-tests", source)
        run = _nccl_tests_table(lines, source)
    return _nccl_tests_document(run, source, op)


def _halves(columns: list[str]) -> list[tuple[bool, int, int]]:
    """(in_place, time column, #wrong column) of the out-of-place and the in-place half of a row."""
    starts = [i for i, c in enumerate(columns) if c in ("time", "cputime")]
    return [(in_place, t, columns.index("#wrong", t)) for in_place, t in zip(NCCL_PLACEMENTS, starts)]


def _nccl_tests_table(lines: list[str], source: str) -> _Run:
    run = _Run()
    halves = _halves(_DEFAULT_COLUMNS)
    for raw in lines:
        line = _LABEL.sub("", raw, count=1)
        if line.startswith("#"):
            if m := _RANK.match(line):
                run.ranks[int(m.group(1))] = (m.group(2), m.group(3).strip())
            elif m := _STARTING.match(line):
                _name_binary(run, m.group(1), source)
            elif "Avg bus bandwidth" in line:
                run.complete = True
            elif {"size", "count", "#wrong"} <= set(line.split()):
                halves = _halves(line.split()[1:])
            continue
        if not _ROW.match(line):
            if not run.binary and not run.rows and (m := _BINARY.search(line)) and " NCCL " not in line:
                run.binary = m.group(1)  # a command line echoed before the output
            continue
        cells = line.split()
        _room_for_a_row(run.rows, source)
        run.rows.append(_Row(int(cells[0]), int(cells[1]), cells[2], cells[3], int(cells[4]),
                             [(in_place, cells[t], cells[w], None) if w < len(cells) else None
                              for in_place, t, w in halves],
                             line.strip()))
    return run


def _name_binary(run: _Run, name: str, source: str) -> None:
    # A second run's output would mix its rows with the first's.
    if run.rows or run.complete:
        raise CommbenchError(f"{source} holds the output of more than one nccl-tests run ({run.binary}_perf, "
                             f"then {name}_perf): import each run's output on its own")
    run.binary = name


# The versions of nccl-tests' -J files (its JSON_FILE_VERSION): 1 from 2.17, 3 in 2.19.6, whose
# layout this reads; a file of another version is read the same way, with a warning.
NCCL_TESTS_JSON_VERSIONS = (1, 2, 3)


def _why(e: Exception) -> str:
    """What a JSON file lacked or held wrong, in words rather than Python's exception names."""
    if isinstance(e, KeyError):
        return f"it has no '{e.args[0]}'"
    return "a field is not of the kind nccl-tests writes" + (f" ({e})" if isinstance(e, ValueError) else "")


def _nccl_tests_json(doc, source: str) -> _Run:
    run = _Run()
    if isinstance(doc, dict) and "schema_version" in doc and (doc.get("tool") or {}).get("name") == "commbench":
        raise CommbenchError(f"{source} is a commbench result file, not nccl-tests' JSON: read it as it is (fit, "
                             f"compare, export), no import needed")
    if isinstance(doc, dict) and doc.get("version") not in NCCL_TESTS_JSON_VERSIONS:
        run.warnings.append(f"{source}: nccl-tests JSON version {doc.get('version')!r}, not one this commbench knows "
                            f"({', '.join(map(str, NCCL_TESTS_JSON_VERSIONS))}): read as version "
                            f"{NCCL_TESTS_JSON_VERSIONS[-1]}; check its figures against the file")
    try:
        m = _BINARY.search(" ".join(doc.get("args") or []))
        run.binary = m.group(1) if m else None
        config = doc.get("config", {})
        run.ranks_per_process = int(config.get("nthreads", 1)) * int(config.get("ngpus", 1))
        if run.ranks_per_process < 1:
            raise ValueError(f"config nthreads {config.get('nthreads', 1)} x ngpus {config.get('ngpus', 1)}: a process "
                             f"drives one rank at least")
        for d in config.get("devices", []):
            # A log may carry a credential-shaped value where a host name should be; the records name
            # each rank's host (per_rank, straggler), beside the header that header() scrubs.
            run.ranks[int(d["rank"])] = (scrub(d.get("hostname", "unknown")), scrub(d.get("device_info", "")))
        # Only the first rank of each process listed: the process's others are there too. A file
        # that lists every rank (its ranks not all multiples of the per-process count) is read as it is.
        if run.ranks and all(r % run.ranks_per_process == 0 for r in run.ranks):
            run.rank_count = len(run.ranks) * run.ranks_per_process
        for r in doc["results"]:
            halves = []
            for in_place, key in zip(NCCL_PLACEMENTS, ("out_of_place", "in_place")):
                h = r.get(key)
                halves.append((in_place, h.get("time", h.get("cpu_time")), h.get("nwrong"),
                               _per_iter(r.get(f"{key}_per_iter"))) if h else None)
            _room_for_a_row(run.rows, source)
            run.rows.append(_Row(int(r["size"]), int(r["count"]), r["type"], r["redop"], int(str(r["root"]).strip()),
                                 halves, json.dumps(r)[:200]))
        run.complete = "average_bus_bandwidth" in doc
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        raise CommbenchError(f"{source}: not the JSON of nccl-tests -J: {_why(e)}") from None
    return run


def _per_iter(report) -> Optional[_PerIter]:
    """A half's -I 1 report (`<placement>_per_iter`), or None where the run was not timed so. Its
    figures stay as written ("nan" included) until the record is made."""
    if report is None:
        return None
    times = report["times_us"]
    per_process = report.get("per_process_max_times_us")
    if not isinstance(times, list) or not times or not (per_process is None or isinstance(per_process, list)):
        raise ValueError("times_us is not a list of iteration times")
    skipped = report.get("skipped_iterations", 0)
    # A count: 2.9 was read as 2, and true as 1.
    if isinstance(skipped, bool) or not (isinstance(skipped, int) or (isinstance(skipped, float) and skipped.is_integer())):
        raise ValueError(f"skipped_iterations {json.dumps(skipped)[:24]} is not a whole number")
    return _PerIter(times, int(skipped), per_process)


def _layout_problem(op: str, row: _Row, ranks: int) -> Optional[str]:
    """Why a row cannot come from op's nccl-tests binary on `ranks` ranks, or None when it can: the
    root column (rooted collectives print theirs, the others -1), the redop column ('none' where
    nothing is reduced) and the count (per rank where the buffers differ, collectives/*.py)."""
    coll = collectives.get(op)
    if coll.rooted != (row.root >= 0):
        return f"root {row.root}, where {op} has " + ("a root rank" if coll.rooted else "none (-1)")
    if (coll.reduces or op in PRINTS_REDOP) != (row.redop != "none"):
        return f"redop {row.redop}, where {op} " + ("reduces" if coll.reduces else "reduces nothing (none)")
    itemsize = NCCL_TYPES.get(row.type, (None, None))[1]
    if itemsize:
        # The printed size is already whole blocks: unrounded, as versions before 2.13.12 (which did
        # not round blocks to 16 bytes) and later ones alike print it.
        shape = coll.shape(row.size, itemsize, ranks, align=1)
        if (shape.size, shape.count) != (row.size, row.count):
            return f"{row.count} elements of {row.type} in {row.size} bytes, where {op} on {ranks} ranks has {shape.count}"
    return None


def _which_op(run: _Run, source: str, given: Optional[str], ranks: int) -> str:
    """The log's collective: the binary it names, else `given` (--op), else the only one whose
    layout fits every row."""
    imported = ", ".join(collectives.names())
    if run.binary in NCCL_TESTS_REFUSED:
        raise CommbenchError(f"{source} is {run.binary}_perf output: commbench does not import {run.binary}, only "
                             f"the nccl-tests runs of {imported}")
    if run.binary and run.binary not in NCCL_TESTS_OPS:
        raise CommbenchError(f"{source} is {run.binary}_perf output, which commbench does not import; it imports "
                             f"the nccl-tests runs of {imported}")
    named = NCCL_TESTS_OPS.get(run.binary)
    if named and given and given != named:
        raise CommbenchError(f"{source} is {run.binary}_perf output ({named}); --op {given} disagrees")
    op = named or given
    if op is None:
        fitting = [o for o in collectives.names() if not any(_layout_problem(o, r, ranks) for r in run.rows)]
        if len(fitting) != 1:
            raise CommbenchError(f"{source}: cannot tell which collective: the log does not name its nccl-tests "
                                 f"binary (<name>_perf) and its table fits {' and '.join(fitting) or 'none'}; give --op")
        op = fitting[0]
    for r in run.rows:
        if problem := _layout_problem(op, r, ranks):
            raise CommbenchError(f"{source}: not {op} output: {problem}, in: {r.context}")
    return op


def _nccl_tests_document(run: _Run, source: str, given: Optional[str]) -> Imported:
    if not run.rows:
        raise CommbenchError(f"{source}: no result rows found in this nccl-tests output")
    if not run.ranks:
        raise CommbenchError(f"{source}: no device lines ('#  Rank ... device ...'): cannot tell how many ranks ran")
    ranks = run.rank_count or len(run.ranks)
    op = _which_op(run, source, given, ranks)
    coll = collectives.get(op)
    left_out = _LeftOut(source)
    records = []
    for r in run.rows:
        dtype = NCCL_TYPES.get(r.type, (r.type, None))[0]
        extra = {"root": r.root} if coll.rooted else {}
        for half in r.halves:
            if half is None:
                continue
            in_place, time_text, wrong_text, per_iter = half
            time_us = _figure(time_text, source, r.context)
            wrong = _figure(wrong_text, source, r.context)
            which = variant({"impl": NCCL_IMPL, "in_place": in_place})
            iterations = per_iter and _iteration_times(per_iter, run, ranks, source, r.context)
            redop = r.redop if coll.reduces else "none"
            if time_us is None:
                left_out.add(f"{which} time is {time_text}", r.size)
            elif wrong is None:
                left_out.add(f"{which} #wrong is {wrong_text or 'null'}: nccl-tests did not check the result", r.size)
            elif per_iter and iterations is None:
                left_out.add(f"{which} has an iteration time that is not a number", r.size)
            elif iterations:
                samples, own = iterations
                ranked = {} if own is None else _per_process_figures(own, samples, run, coll)
                records.append(measured(op, NCCL_IMPL, dtype, redop, ranks, r.size, r.count, samples, wrong,
                                        in_place=in_place, **extra, **ranked, nccl_tests_time_us=time_us).as_dict())
            else:
                records.append(single(op, NCCL_IMPL, dtype, redop, ranks, r.size, r.count, time_us, wrong,
                                      in_place=in_place, **extra).as_dict())
    timed_each = [bool(half[3]) for r in run.rows for half in r.halves if half]
    if any(timed_each) and not all(timed_each):
        raise CommbenchError(f"{source}: some results carry nccl-tests' per-iteration times (-I 1) and some do not: "
                             f"not the JSON of one run")
    warnings = run.warnings + left_out.warnings()
    truncated = None
    if not run.complete:
        truncated = (f"truncated: {source} ends before nccl-tests' closing 'Avg bus bandwidth' line "
                     f"(the run was cut short after {len(run.rows)} size(s))")
        warnings.append(f"{truncated}; imported as a failed run")
    hosts = list(dict.fromkeys(h for h, _ in run.ranks.values()))
    gpus = sorted({g for _, g in run.ranks.values()} - {""})
    doc = _document("nccl-tests", source, op, ranks, records, hosts, {"gpus": gpus} if gpus else None, truncated,
                    NCCL_TESTS_PER_ITERATION if any(timed_each) else None)
    return Imported(doc, warnings)


def _iteration_times(per_iter: _PerIter, run: _Run, ranks: int, source: str, context: str):
    """(each iteration's time, s; with several processes, each process's own, s, one row a process),
    the first skipped iterations left out as nccl-tests leaves them out of its statistics; None where a
    time is not a number ("nan")."""
    if not 0 <= per_iter.skipped < len(per_iter.times):
        raise CommbenchError(f"{source}: skipped_iterations {per_iter.skipped} of {len(per_iter.times)} iterations, in: "
                             f"{context}")
    kept = slice(per_iter.skipped, None)
    times = [_figure(t, source, context) for t in per_iter.times]
    if None in times:
        return None
    samples = np.array(times[kept]) * 1e-6
    if samples.min() < 0 or not samples.any():
        raise CommbenchError(f"{source}: times_us {'holds a negative time' if samples.min() < 0 else 'holds only zeros'}"
                             f", which no iteration takes, in: {context}")
    rows = per_iter.per_process
    if rows is None:
        return samples, None
    processes = ranks // run.ranks_per_process
    if len(rows) != processes or not all(isinstance(row, list) and len(row) == len(times) for row in rows):
        raise CommbenchError(f"{source}: per_process_max_times_us holds {len(rows)} rows where {processes} processes "
                             f"ran ({ranks} ranks, {run.ranks_per_process} a process), each of {len(times)} iterations, "
                             f"in: {context}")
    own = [[_figure(t, source, context) for t in row] for row in rows]
    if any(None in row for row in own):
        return None
    return samples, np.array(own)[:, kept] * 1e-6


def _per_process_figures(own: np.ndarray, samples: np.ndarray, run: _Run, coll) -> dict:
    """per_rank and straggler (arrival.py) from each process's own times. A process of
    several ranks (-g or -t above 1) has one row, its slowest GPU's: its entry is its first rank's,
    with the process and how many ranks it drives."""
    k = run.ranks_per_process
    hosts = [run.ranks.get(p * k, ("unknown", ""))[0] for p in range(len(own))]
    found = arrival.figures(own, hosts, float(np.median(samples)) * 1e6, CUDA_EVENT_RESOLUTION_S,
                               same_work=not coll.rooted)
    if k > 1:
        for entry in [*found["per_rank"], found.get("straggler")]:
            if entry:
                entry.update(rank=entry["rank"] * k, process=entry["rank"], process_ranks=k)
    return found


# ---- OSU --------------------------------------------------------------------------------------------

OSU_TESTS = {"latency": "pingpong", "bw": "bandwidth", "allreduce": "allreduce"}
_OSU_LINE = re.compile(r"# OSU MPI|# Size\s|\d+\s+(-?[\d.]+|-?nan|-?inf|N/A)(\s|$)")


# The tests imported, by the name in their title ('# OSU MPI <name> Test v7.4').
_OSU_TITLES = {"Latency": "pingpong", "Bandwidth": "bandwidth", "Allreduce Latency": "allreduce"}
_OSU_TITLE = re.compile(r"# OSU MPI\S* (?P<name>.+?) Test(?: v[\d.]+)?\s*$")


def _osu_test(lines: list[str], source: str) -> Optional[str]:
    """From the title line ('# OSU MPI Allreduce Latency Test v7.4') when there is one: a test not
    imported is refused by it (osu_alltoall's latency is no ping-pong). Without one (osu_latency
    prints its title on stderr), from the column header."""
    title = next((line for line in lines if line.startswith("# OSU MPI")), "")
    if title:
        m = _OSU_TITLE.match(title)
        name = m.group("name") if m else title
        if name == "Bi-Directional Bandwidth":
            raise CommbenchError("osu_bibw reports both directions together; import osu_bw (one direction) instead")
        if name not in _OSU_TITLES:
            raise CommbenchError(f"{source}: '{title.lstrip('# ')}' is not an OSU test commbench imports "
                                 f"(osu_latency, osu_bw, osu_allreduce)")
        return _OSU_TITLES[name]
    header = next((line for line in lines if line.startswith("# Size")), "")
    if "Bandwidth" in header:
        return "bandwidth"
    if "Avg Latency" in header and "Min Latency" not in header:
        return "pingpong"
    return None


def import_osu(stream: TextIO, source: str, test: Optional[str] = None, ranks: Optional[int] = None) -> Imported:
    """osu_latency (one-way latency), osu_bw (MB/s, 1e6 B/s, per message of a window) and
    osu_allreduce (average latency per size). `test` (latency, bw, allreduce) overrides detection."""
    read = _Tail(_lines(stream))
    lines = _tool_lines(read, _OSU_LINE.match, "OSU", source)
    # OSU prints no closing line: a log cut short shows only as a last line without its end.
    cut = lines[-1] if read.last and not read.last.endswith("\n") and lines[-1][:1].isdecimal() else None
    if cut is not None:
        lines = lines[:-1]
    detected = _osu_test(lines, source)
    if test and detected and OSU_TESTS[test] != detected:
        raise CommbenchError(f"{source}: --test {test} given but the log's title says "
                             f"{next(k for k, v in OSU_TESTS.items() if v == detected)}")
    test = OSU_TESTS[test] if test else detected
    if test is None:
        raise CommbenchError(f"{source}: cannot tell which OSU test this is; give --test latency, bw or allreduce")
    nranks = ranks or 2
    if test != "allreduce" and nranks != 2:
        raise CommbenchError("osu_latency and osu_bw run between 2 ranks: drop --ranks")
    left_out = _LeftOut(source)
    recs = []
    for line in lines:
        cells = line.split()
        if line.startswith("#") or len(cells) < 2 or not cells[0].isdecimal():
            continue
        _room_for_a_row(recs, source)
        size, value = int(cells[0]), _figure(cells[1], source, line)
        if value is None:
            left_out.add(f"the figure is {cells[1]}", size)
        elif test == "bandwidth":
            time_us = size / (value * 1e6) * 1e6 if value > 0 else 0.0
            recs.append(single("bandwidth", "osu", "uint8", "none", nranks, size, size, time_us, 0, pair=[0, 1]))
        elif test == "pingpong":
            recs.append(single("pingpong", "osu", "uint8", "none", nranks, size, size, value, 0, pair=[0, 1]))
        else:
            spread, iterations = None, 1
            if len(cells) >= 5:
                lo, hi = _figure(cells[2], source, line), _figure(cells[3], source, line)
                if lo is not None and hi is not None:  # else the average stands for both
                    spread = (lo, hi)
                iterations = int(_figure(cells[4], source, line) or 1)
            recs.append(single("allreduce", "osu", "int8", "sum", nranks, size, size, value, 0, iterations, spread))
    truncated = (f"truncated: {source} ends in the middle of a row ('{cut.strip()}', no line end): the run was "
                 f"cut short") if cut is not None else None
    warnings = left_out.warnings() + ([f"{truncated}; that row is left out and the run imported as failed"]
                                      if truncated else [])
    return Imported(_document("osu", source, test, nranks, [r.as_dict() for r in recs], [], truncated=truncated),
                    warnings)
