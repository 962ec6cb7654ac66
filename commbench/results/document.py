"""Result files: a versioned JSON document per run, validated against the shipped JSON Schema.

The file is created exclusively when a run starts and rewritten atomically after every measured
row, so a run that fails midway leaves every row it measured, and no existing file is overwritten.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import json
import math
import os
import socket
import stat
from collections.abc import Iterable
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Optional

import numpy as np
import orjson

from .. import collectives
from ..errors import CommbenchError
from ..redact import scrub, scrub_all
from .findings import ORDER
from .legacy import upgrade
from .nccl_knobs import schema_properties
from .series import series_key

if TYPE_CHECKING:
    import pandas as pd

SCHEMA_VERSION = 1
# What a measured figure can be, by the unit its field's name ends in: 0 (nothing moved, or a size of
# nothing), or a time from a picosecond to about 12 days, a bandwidth from a byte in 12 days to 1 EB/s. Beyond
# them a figure is no measurement, and arithmetic on it over- or underflows: a median of two 1e308 us
# times, a ratio of 5e-324 GB/s, the log of a 5e-324 us time in ms.
FIGURE_RANGES = {"_us": (1e-6, 1e12), "_gbps": (1e-15, 1e9)}
# Fields under a unit that are ratios, not figures of it; and spreads, differences of figures, which
# rounding leaves tiny rather than 0 (a standard deviation of equal samples): their range has no floor.
RATIOS = ("cv",)
SPREADS = ("stdev", "iqr", "skew_median_us", "skew_p90_us", "waited_us")


@lru_cache(maxsize=1)
def schema() -> dict:
    from ..collectives import names
    doc = json.loads(resources.files("commbench").joinpath("schema/result.schema.json").read_text())
    doc["properties"]["config"]["properties"]["op"]["enum"] = [*names(), "p2p", "copy"]
    doc["$defs"]["links_host"]["properties"]["findings"]["items"]["properties"]["kind"]["enum"] = ORDER
    doc["$defs"]["record"]["properties"].update(schema_properties())
    doc["properties"]["config"]["properties"]["nccl_variants"] = {
        "$comment": "the variants of NCCL's call the run forced (results/nccl_knobs.py), as their records carry them",
        "type": "array", "items": {"type": "object", "properties": schema_properties(), "additionalProperties": False}}
    _bound_figures(doc, None)
    return doc


def _unit(name) -> Optional[str]:
    return next((u for u in FIGURE_RANGES if isinstance(name, str) and name.endswith(u)), None)


def _bound_figures(node, unit: Optional[str], spread: bool = False) -> None:
    """Gives every number of at least 0 under a field named for a unit (FIGURE_RANGES) that unit's
    range, in place: one rule for every figure the schema holds, where it holds them."""
    if isinstance(node, list):
        for child in node:
            _bound_figures(child, unit, spread)
        return
    if not isinstance(node, dict):
        return
    extra = node.get("additionalProperties")
    if unit and isinstance(extra, dict):  # a ratio or spread among the unit's figures: a schema of its own
        for name in set(RATIOS + SPREADS) & set(node.get("required", ())) - set(node.get("properties", {})):
            node.setdefault("properties", {})[name] = dict(extra)
    types = node.get("type")
    if unit and node.get("minimum") == 0 and (types == "number" or isinstance(types, list) and "number" in types):
        lo, hi = FIGURE_RANGES[unit]
        node["maximum"] = hi
        if not spread:
            node["not"] = {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": lo}
    for key, child in node.items():
        if key in ("properties", "$defs") and isinstance(child, dict):
            for name, sub in child.items():
                _bound_figures(sub, None if name in RATIOS else _unit(name) or (unit if key == "properties" else None),
                               name in SPREADS)
        elif key in ("items", "additionalProperties", "anyOf", "oneOf", "allOf"):
            _bound_figures(child, unit, spread)


def figure_problem(value: float, unit: str) -> Optional[str]:
    """Why `value` is no measured figure of `unit` (a FIGURE_RANGES key), or None."""
    lo, hi = FIGURE_RANGES[unit]
    return None if value == 0 or lo <= value <= hi else f"{value!r} is no measured figure: 0, or {lo:g} to {hi:g}"


def _non_finite(value, path: tuple = ()) -> Optional[tuple]:
    """(JSON path, value) of the first NaN or infinity in value. The schema cannot say it: NaN
    passes every bound (NaN < 0 is false) and JSON Schema has no notion of infinity."""
    if isinstance(value, float) and not math.isfinite(value):
        return path, value
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in children:
        found = _non_finite(child, (*path, key))
        if found is not None:
            return found
    return None


def _all_finite(value) -> bool:
    """True where value has no NaN or infinity, said by the C encoder (20 times the walk's speed);
    False leaves it to _non_finite to find where (and to judge values the encoder cannot write)."""
    try:
        json.dumps(value, allow_nan=False)
        return True
    except (TypeError, ValueError):
        return False


@lru_cache(maxsize=1)
def _validator():
    import jsonschema
    return jsonschema.Draft202012Validator(schema())


@lru_cache(maxsize=1)
def _compiled():
    """The schema compiled to Python code (fastjsonschema): it checks 100,000 records in about a
    second where jsonschema's walk takes 40. It only says yes fast: a document it refuses is walked
    by jsonschema, which names the field and decides (1.0 is an integer to it, not to this). The
    schema uses only keywords draft 7 shares with 2020-12, which fastjsonschema implements."""
    import fastjsonschema
    return fastjsonschema.compile({**schema(), "$schema": "http://json-schema.org/draft-07/schema#"},
                                  use_formats=False)


def _accepted(doc: dict) -> bool:
    """The quick yes: the samples checked in bulk, the rest by the compiled schema (whose walk of
    every sample took 18 s for 10,000 records of 2,000 iterations)."""
    import fastjsonschema
    if _samples_problem(doc.get("results")) is not None:
        return False
    try:
        _compiled()(_without_samples(doc))
        return True
    except fastjsonschema.JsonSchemaException:
        return False


def _without_samples(doc: dict) -> dict:
    """doc with each record's list of samples emptied (checked apart: _samples_problem)."""
    records = doc.get("results")
    if not isinstance(records, list):
        return doc
    return {**doc, "results": [{**r, "samples_us": []} if isinstance(r, dict) and isinstance(r.get("samples_us"), list)
                               else r for r in records]}


@lru_cache(maxsize=1)
def _compiled_record():
    """The schema's record alone, compiled as _compiled: which record is the first bad one, fast."""
    import fastjsonschema
    return fastjsonschema.compile({"$schema": "http://json-schema.org/draft-07/schema#", "$defs": schema()["$defs"],
                                   "$ref": "#/$defs/record"}, use_formats=False)


def _refuse(doc: dict, source: str, finite: bool) -> None:
    """Names the first bad field of a document the quick checks refused; returns where jsonschema,
    the authority, finds nothing wrong. `finite`: every number of doc is known finite. Its cost does
    not grow with the records after the first bad one: jsonschema walks the document without its
    records, and the first record the compiled check refuses."""
    samples = _samples_problem(doc.get("results"))
    if samples is not None:
        raise CommbenchError(f"{source}: invalid field '{samples[0]}': {samples[1]}")
    # The rest, with the samples (checked above) left out of the schema's walk.
    doc = _without_samples(doc)
    bad = None if finite else _non_finite(doc)
    if bad is not None:
        where = "/".join(str(p) for p in bad[0]) or "(top level)"
        raise CommbenchError(f"{source}: invalid field '{where}': {bad[1]} is not a finite number")
    errors = _errors(doc)
    if errors:
        err = _nearest(min(errors, key=lambda e: list(e.absolute_path)))
        where = "/".join(str(p) for p in err.absolute_path) or "(top level)"
        raise CommbenchError(f"{source}: invalid field '{where}': {_message(err)}")


# The most characters of a field's value an error line quotes: jsonschema's message starts with the
# whole value, and a host-level links section at 4 hosts made a line of 2.6 KB.
QUOTED = 80


def _nearest(err):
    """Of an error of oneOf (a links section at rank or host level), the first error of the branch the
    document comes nearest to (fewest errors): what is wrong in the host-level section it is, not
    that it lacks the rank level's matrices."""
    if err.validator not in ("oneOf", "anyOf") or not err.context:
        return err
    branches: dict = {}
    for e in err.context:
        branches.setdefault(e.relative_schema_path[0], []).append(e)
    nearest = min(branches.values(), key=len)
    return _nearest(min(nearest, key=lambda e: list(e.absolute_path)))


def _message(err) -> str:
    """jsonschema's message, the value it starts with cut to QUOTED characters; a figure out of its
    unit's range said as figure_problem says it."""
    bounds = err.schema.get("not", {}) if isinstance(err.schema, dict) else {}
    if err.validator in ("maximum", "not") and "exclusiveMaximum" in bounds and isinstance(err.instance, (int, float)):
        lo, hi = bounds["exclusiveMaximum"], err.schema["maximum"]
        return f"{err.instance!r} is no measured figure: 0, or {lo:g} to {hi:g}"
    shown = repr(err.instance)
    if len(shown) <= QUOTED or not err.message.startswith(shown):
        return err.message
    return json.dumps(err.instance)[:QUOTED - 3] + "..." + err.message[len(shown):]


def _errors(doc: dict) -> list:
    """jsonschema's errors of doc: of all but its records, and of its first record that the compiled
    check refuses (all of them where none is: jsonschema decides, as on 1.0, which it takes for an
    integer)."""
    import fastjsonschema
    records = doc.get("results")
    if not isinstance(records, list):
        return list(_validator().iter_errors(doc))
    errors = list(_validator().iter_errors({**doc, "results": []}))
    check = _compiled_record()
    for i, r in enumerate(records):
        try:
            check(r)
        except fastjsonschema.JsonSchemaException:
            found = list(_validator().descend(r, {"$ref": "#/$defs/record"}, path=i))
            if found:
                for e in found:
                    e.path.appendleft("results")
                return errors + found
    return errors or list(_validator().iter_errors(doc))


def _samples_problem(records) -> Optional[tuple[str, str]]:
    """(JSON path, what is wrong) of the first bad per-iteration sample: each must be a finite number
    of at least 0, as the schema says. Checked here, in bulk, rather than one schema descent per
    sample: a file of a fleet's runs holds millions of them."""
    for i, r in enumerate(records if isinstance(records, list) else ()):
        samples = r.get("samples_us") if isinstance(r, dict) else None
        if not isinstance(samples, list) or not samples:
            continue
        if not set(map(type, samples)) <= {int, float}:  # at C speed; the loop only to name the first
            j, x = next((j, x) for j, x in enumerate(samples) if type(x) not in (int, float))
            return f"results/{i}/samples_us/{j}", f"{json.dumps(x)} is not of type 'number'"
        values = np.asarray(samples, dtype=np.float64)
        lo, hi = FIGURE_RANGES["_us"]
        bad = ~np.isfinite(values) | (values < 0) | (values > hi) | ((values > 0) & (values < lo))
        if bad.any():
            j = int(np.argmax(bad))
            return f"results/{i}/samples_us/{j}", (f"{samples[j]} is not a finite number" if not np.isfinite(values[j])
                                                   else f"{samples[j]} is less than the minimum of 0" if values[j] < 0
                                                   else figure_problem(float(values[j]), "_us"))
    return None


def validate(doc: dict, source: str = "result", finite: bool = False) -> None:
    """Raises CommbenchError naming the first bad field (as a JSON path) of an invalid document.
    `finite`: the caller read doc with every number finite (load_document's parse said so)."""
    finite = finite or _all_finite(doc)
    if not finite or not _accepted(doc):
        _refuse(doc, source, finite)
    unknown = next(((i, r["op"]) for i, r in enumerate(doc["results"]) if r["op"] not in _OPS), None)
    if unknown is not None:
        raise CommbenchError(f"{source}: record {unknown[0]} has op '{unknown[1]}', which commbench does not measure "
                             f"(its ops: {', '.join(_OPS)})")
    repeated = _repeated_record(doc["results"])
    if repeated is not None:
        raise CommbenchError(f"{source}: record {repeated[1]} repeats record {repeated[0]} (the same series and size): "
                             f"a result file measures each size of a series once")


# What a record's op may be: a registered collective, a p2p test or a copy.
_OPS = (*collectives.names(), *collectives.PAIRWISE)


def _repeated_record(records: list[dict]) -> Optional[tuple[int, int]]:
    """(first, second) indices of two records of one series at one size, or None. Empty messages may
    repeat: nccl-tests prints a 0-byte row for each size its per-rank rounding takes to nothing."""
    seen: dict = {}
    for i, r in enumerate(records):
        if r["size_bytes"] == 0:
            continue
        key = (series_key(r), r["size_bytes"])
        if key in seen:
            return seen[key], i
        seen[key] = i
    return None


def _refuse_constant(name: str):
    # Python's json reads NaN and Infinity, which JSON itself does not have.
    raise ValueError(f"{name} is not a JSON number")


class _Overflow(Exception):
    pass


def _finite_float(text: str) -> float:
    value = float(text)
    if value - value != 0:  # 1e999 reads as infinity
        raise _Overflow
    return value


def read_json(path: str, what: str):
    """The JSON value in the file at path, or CommbenchError in one line naming `what` the file
    should have been: unreadable, not UTF-8, not JSON, or JSON with NaN or Infinity."""
    return _read_json(path, what)[0]


# The largest file of JSON the analysis reads: above the largest result file commbench writes itself
# (10,000 sizes of 2,000 samples each: about 170 MiB), below what reading it would take of a node's
# memory (about 9 bytes of memory a byte of file: 1.5 GB for those 170 MiB).
MAX_FILE_BYTES = 512 << 20


def open_to_read(path: str, what: str, limit: int, encoding: Optional[str] = None):
    """The file at path opened for reading (binary, or text in `encoding`, undecodable bytes replaced),
    refused in one line where it is larger than `limit` bytes. A FIFO is opened without waiting for a
    writer: with none, it reads as empty instead of blocking forever; one with a writer is read as it
    comes (a log piped in by process substitution)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise CommbenchError(f"cannot read {what} {path}: {e.strerror}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise CommbenchError(f"cannot read {what} {path}: it is a folder")
        if stat.S_ISREG(info.st_mode) and info.st_size > limit:
            raise CommbenchError(f"{path}: {info.st_size:,} bytes, more than the {limit:,} ({limit >> 20} MiB) a {what} "
                                 f"may be (docs/results.md)")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb") if encoding is None else os.fdopen(fd, "r", encoding=encoding, errors="replace")


def read_bounded(path: str, what: str, limit: int) -> bytes:
    """The bytes of the file at path (open_to_read's), refused in one line beyond `limit`: a FIFO or a
    device (/dev/zero) has no size to refuse beforehand, so at most limit + 1 bytes are read."""
    try:
        with open_to_read(path, what, limit) as f:
            raw = f.read(limit + 1)
    except OSError as e:
        raise CommbenchError(f"cannot read {what} {path}: {e.strerror}") from None
    if len(raw) > limit:
        raise CommbenchError(f"{path}: larger than the {limit >> 20} MiB a {what} may be (docs/results.md)")
    return raw


def _read_json(path: str, what: str) -> tuple:
    """(read_json's value, whether every number in it is finite)."""
    raw = read_bounded(path, what, MAX_FILE_BYTES)
    try:
        # orjson parses a file of 100,000 records in 0.45 s where json takes 0.75, and refuses what
        # JSON does not allow (NaN, Infinity, 1e999) by itself; whatever it refuses (those, text that
        # is not UTF-8, deep nesting) is read again by json, which gives this function's messages.
        return orjson.loads(raw), True
    except orjson.JSONDecodeError:
        pass
    try:
        # Decoded first: json reads bytes in UTF-16 or UTF-32 too, and a result file is UTF-8 alone.
        text = raw.decode("utf-8")
        try:
            return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float), True
        except _Overflow:  # kept: the schema's check names the field
            return json.loads(text, parse_constant=_refuse_constant), False
    except UnicodeDecodeError:
        raise CommbenchError(f"{path} is not a {what}: not UTF-8 text") from None
    except RecursionError:
        raise CommbenchError(f"{path} is not a {what}: nested too deeply") from None
    except ValueError as e:  # json.JSONDecodeError is one
        raise CommbenchError(f"{path} is not JSON: {e}") from None


def load_document(path: str) -> dict:
    """A result file as a validated dict, in today's form whatever version of commbench wrote it
    (legacy.upgrade)."""
    # Python's cycle collector, run again and again over every object made so far while a file of
    # 100,000 records is parsed and checked (none of which can be a cycle), took a sixth of the time.
    collecting = gc.isenabled()
    gc.disable()
    try:
        doc, finite = _read_json(path, "result file")
        if not isinstance(doc, dict):  # said here: the schema's message would quote the whole document
            raise CommbenchError(f"{path} is not a result file: JSON {type(doc).__name__}, not an object")
        validate(doc, path, finite)
        return upgrade(doc)
    finally:
        # Nor are they cycles once read: out of the collector's reach for good (gc.freeze), the
        # collections that a fit, a report's tables and a plot set off no longer walk them again and
        # again (about a second of a report of 100,000 records).
        gc.freeze()
        if collecting:
            gc.enable()


# An import of nccl-tests -I 1 (2.19): each iteration timed between CUDA events on a stream the host
# keeps filling, the slowest GPU's, not one call alone after a barrier as commbench's per-iteration.
NCCL_TESTS_PER_ITERATION = "per-iteration (nccl-tests -I 1)"


def timing_of(doc: dict) -> str:
    """How a document's samples were taken (run/policy.py TIMINGS): as its policy says; files written
    before the choice existed, per iteration. nccl-tests times loops (with -I 1 each iteration too,
    NCCL_TESTS_PER_ITERATION); OSU 7.4's collectives time each call alone, as per-iteration timing
    does, but average the ranks' own times."""
    policy = doc.get("config", {}).get("policy", {})
    tool = policy.get("imported_from")
    if tool:
        return policy.get("timing", "loop") if tool == "nccl-tests" else "per-iteration, the ranks' average"
    return policy.get("timing", "per-iteration")


def write_new(path: str, doc, exists_message: str) -> None:
    """Writes JSON (a dict or list), text (a str) or bytes to a path that must not exist yet, whole or
    not at all: the data goes to a temporary file in the same folder, which takes the name only
    once complete (commbench.atomic), so a full disk or a crash leaves nothing to block a retry."""
    from .atomic import new_file
    data = doc if isinstance(doc, (str, bytes)) else json.dumps(doc, indent=1) + "\n"
    with new_file(path, exists_message) as tmp:
        with open(tmp, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)


def load(path: str) -> pd.DataFrame:
    """Validates a result file and returns one DataFrame row per (impl, size) record; the time
    statistics become columns time_us_median, time_us_p99, ... and the run's metadata is in
    DataFrame.attrs['meta']."""
    import pandas as pd  # here, not at the top: pandas takes a while to import and only load() needs it
    doc = load_document(path)
    rows = []
    for rec in doc["results"]:
        row = {k: v for k, v in rec.items() if k not in ("time_us", "samples_us")}
        row.update({f"time_us_{k}": v for k, v in rec["time_us"].items()})
        row["samples_us"] = rec["samples_us"]
        rows.append(row)
    df = pd.DataFrame(rows)
    df.attrs["meta"] = {k: v for k, v in doc.items() if k != "results"}
    return df


DEFAULT_DIR = "commbench-results"


def default_path(op: str, now: Optional[datetime.datetime] = None, pid: Optional[int] = None) -> str:
    """commbench-results/<UTC stamp>-<pid>_<host>_<op>.json: the process id keeps apart the names of
    runs started in the same second."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    return os.path.join(DEFAULT_DIR, f"{stamp}-{pid or os.getpid()}_{socket.gethostname()}_{op}.json")


def taken_message(path: str) -> str:
    return f"result file {path} already exists; choose another --output"


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def header(argv: list[str], config: dict, machine: dict, env: Optional[dict] = None, tool: Optional[dict] = None,
           created: Optional[str] = None, **more) -> dict:
    """A result document's header, whoever writes it (a run, an importer, a test): the tool that
    wrote it (this commbench by default), when, the command, the run's configuration, the machine,
    the recorded environment and what the command adds (topology, imported, numerics, ...)."""
    if tool is None:
        from ..node.machine import tool_info
        tool = tool_info()
    # What the user typed, and what came from files and the launcher, may hold a credential (a token in
    # a launch command or a path, a host name an imported file gives): scrubbed, as the environment is.
    return {"tool": tool, "created": created or utc_now(),
            **scrub_all({"argv": argv, "config": config, "machine": machine, "env": env if env is not None else {},
                         **more})}


def new_document(head: dict, results: Iterable[dict] = (), status: str = "running", error: Optional[str] = None) -> dict:
    """The one place a result document is put together: schema version, header, status, records."""
    return {"schema_version": SCHEMA_VERSION, **head, "status": status, "error": error, "results": list(results)}


class ResultFile:
    """The result file of one run, owned by rank 0."""

    def __init__(self, path: str, header: dict):
        self.path = path
        self.doc = new_document(header)
        # The whole file is rewritten after every row: each record is encoded once, when it comes,
        # and a rewrite only joins them (encoding the whole document each time, a 1K-1G sweep spent
        # seconds here).
        self._encoded: list[str] = []
        # Exclusive creation: an existing result is never replaced.
        write_new(path, self.doc, taken_message(path))

    def add(self, *records: dict) -> None:
        """Rows in one rewrite (a host-level links round adds its thousands of flows at once)."""
        self.doc["results"].extend(records)
        self._encoded.extend(json.dumps(r) for r in records)
        try:
            self._rewrite()
        except OSError:
            # The file is the record: what it lacks, the summary must not show.
            del self.doc["results"][len(self.doc["results"]) - len(records):]
            del self._encoded[len(self._encoded) - len(records):]
            raise

    def _rewrite(self) -> None:
        head = json.dumps({k: v for k, v in self.doc.items() if k != "results"})
        self._write(f'{head[:-1]}, "results": [{", ".join(self._encoded)}]}}\n')

    def put(self, key: str, value) -> None:
        """Sets a top-level section (links, scale, numerics) and rewrites the file; a failed write
        leaves the document as the file has it."""
        missing = object()
        old = self.doc.get(key, missing)
        self.doc[key] = value = scrub_all(value)  # a section may quote a path (links' topology)
        try:
            self._rewrite()
        except OSError:
            if old is missing:
                del self.doc[key]
            else:
                self.doc[key] = old
            raise

    def has_rows(self) -> bool:
        """Whether anything was measured: timing records, or a numerics run's rows."""
        return bool(self.doc["results"]) or bool(self.doc.get("numerics", {}).get("rows"))

    def finish(self, error: Optional[str] = None, status: str = "failed") -> None:
        self.doc["status"] = status if error else "complete"
        self.doc["error"] = scrub(error) if error else error  # a library's error may quote a credential
        if error:
            # A run that ends on a failure may have a moment only: a launcher that saw a rank die
            # sends the others SIGTERM and, a quarter of a second later (Open MPI's), SIGKILL. The
            # records are encoded already; joining them is all the write costs.
            self._rewrite()
        else:
            self._write(json.dumps(self.doc, indent=1) + "\n")

    def discard(self) -> None:
        """Removes the file of a run refused before it measured anything: a file with no rows would
        only block a retry with the same --output."""
        os.unlink(self.path)

    def _write(self, text: str) -> None:
        replace_whole(self.path, text)


def replace_whole(path: str, text: str) -> None:
    """Replaces a file whole or not at all: a write that fails (a full disk) leaves the last good
    version and no temporary file. The temporary file is a new hidden one of atomic.py's (any legal
    name can be written; nothing of the user's beside it is touched)."""
    from .atomic import create_temporary
    tmp = create_temporary(os.path.dirname(path) or ".", os.path.basename(path))
    try:
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise OSError(e.errno, e.strerror, path) from None  # the file written, not its temporary name
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def left_as(path: str) -> dict:
    """A result file as its ranks left it ({} where it cannot be read)."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def close_abandoned(path: str, error: str, status: str = "peer-lost") -> bool:
    """A result file that its owner, rank 0, left `running` (its process ended: killed, or its host
    lost; or the launch ended it, held by a stopped rank), closed by the process that started the
    ranks once every one of them has ended: `status`, `error`, the rows kept. Returns whether it was one."""
    doc = left_as(path)
    if doc.get("status") != "running":
        return False
    doc["status"], doc["error"] = status, scrub(error)
    with contextlib.suppress(OSError):
        replace_whole(path, json.dumps(doc, indent=1) + "\n")
        return True
    return False
