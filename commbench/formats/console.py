"""console: the table a run prints as it goes, in nccl-tests' layout: header lines, then one block
per impl with one row per size. The live run (run/reporter.py) prints it line by line with these
functions; `export --format console` prints a whole result file the same way, one block per series.
A run of both placements (--place both, a nccl-tests import) puts a size's two in one row, as
nccl-tests prints them.

Every cell is right-aligned in its column and one space from its neighbours, so values never run
together. A live run prints each row as it is measured, before the widest value is known: its
columns are as wide as any plausible value (DEFAULT_WIDTHS, e.g. 100 s in microseconds); a whole
file's columns widen further where a value needs it.
"""

from __future__ import annotations

import itertools
from typing import Optional

from .. import collectives
from ..results.document import NCCL_TESTS_PER_ITERATION, timing_of
from ..results.series import SERIES_FIELDS, by_series, series_head, variant, where
from ..results.stats import iqr
from . import numerics

SUMMARY = "the table a run prints: nccl-tests' layout, one block per series, CV and IQR beside the median"
BINARY = False
SAMPLES = False

COLUMNS = ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "min", "p99", "CV", "IQR")
# Loop timing has no per-iteration samples: its p99 column gives way to the slowest rank's time per call.
LOOP_COLUMNS = tuple("slowest" if c == "p99" else c for c in COLUMNS)
UNITS = ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(%)", "(%)")
DEFAULT_WIDTHS = (11, 11, 8, 5, 4, 11, 7, 7, 6, 11, 11, 6, 6)
# A row's parts: what the call was, what nccl-tests prints of it, and the spread commbench adds.
HEAD, HALF, SPREAD = slice(0, 5), slice(5, 9), slice(9, 13)
PLACEMENTS = ("out-of-place", "in-place")
MISSING = ("n/a",) * 4


def both(out: tuple, inp: tuple) -> tuple:
    """A row of --place both, in nccl-tests' layout: the call, then the out-of-place and the in-place
    half (time, algbw, busbw, #wrong each: a script's fields 6-13 are nccl-tests' own), then the two
    halves' spreads; `out` and `inp` are single-placement rows (or their columns, units, widths)."""
    return out[HEAD] + out[HALF] + inp[HALF] + out[SPREAD] + inp[SPREAD]


BOTH_WIDTHS = both(DEFAULT_WIDTHS, DEFAULT_WIDTHS)
# NCCL's own call of a collective ends its rows with the algorithm and protocol NCCL reported for it
# (transports/nccl_choices.py): "RING/SIMPLE"; "p2p" where NCCL runs the call as sends and receives,
# "-" where it reported nothing (one rank, a profiler plugin of the user's, NCCL before 2.27).
CHOICE, CHOICE_WIDTH = "algo/proto", 12


# overlap's records end their rows with both sides' figures (run/overlap.py): the collective alone,
# the computation alone (means, us), OSU's overlap, and each side's time beside the other over alone;
# under --place both, each placement's.
OVERLAP = ("alone", "compute", "overlap", "comm x", "compute x")
OVERLAP_UNITS = ("(us)", "(us)", "(%)", "", "")
OVERLAP_WIDTHS = (11, 11, 7, 7, 9)


def shows_overlap(meta: dict) -> bool:
    return "overlap" in meta["config"]


def overlap_cells(rec: Optional[dict]) -> tuple:
    if rec is None:
        return ("n/a",) * len(OVERLAP)
    o = rec["overlap"]
    return (_num(o["comm_us"]), _num(o["compute_us"]), _num(rec["overlap_pct"], 1), _num(rec["slowdown_comm"]),
            _num(rec["slowdown_compute"]))


def shows_choice(meta: dict, impl: str) -> bool:
    """Whether a block of `impl` has the algo/proto column: NCCL's call of a collective (impl nccl, the
    transport's own call) measured by commbench, not imported."""
    cfg = meta["config"]
    return impl == "nccl" and cfg["op"] in collectives.names() and not cfg["policy"].get("imported_from")


def choice_cell(rec: dict) -> str:
    c = rec.get("nccl_choice")
    if c:
        return f"{c['algo']}/{c['proto']}"
    return "p2p" if collectives.get(rec["op"]).peer_to_peer else "-"


def header(meta: dict) -> list[str]:
    """The lines above the blocks: what ran where, and what the figures mean."""
    m = meta["machine"]
    hosts = m["hosts"]
    cfg = meta["config"]
    return [
        f"# commbench {meta['tool']['version']}" + (f" ({meta['tool']['git_commit'][:12]})" if meta["tool"]["git_commit"] else ""),
        f"# {cfg['op']}: {m['ranks']} rank(s) on {len(hosts)} host(s): {', '.join(hosts)} (launcher: {m['launcher']})",
        f"# MPI: {m['mpi'] or 'not available'}",
        f"# torch {m['torch']}, Python {m['python']}, {m['cpu_model']}, {m['cores']} cores",
        f"# impls: {', '.join(cfg['impls'])}; dtype {cfg['dtype']}; redop {cfg['redop']}; " + place_text(cfg),
        *gpu_lines(cfg),
        *timing_lines(meta),
    ]


def place_text(cfg: dict) -> str:
    return {"out": "out-of-place", "in": "in-place",
            "both": "out-of-place and in-place, side by side as nccl-tests prints them"}[cfg["place"]]


def timing_lines(meta: dict) -> list[str]:
    """What a row's figures are: the timing convention that made them (run/policy.py TIMINGS), or
    the tool's whose output was imported."""
    cfg = meta["config"]
    spread = "# CV = stdev / mean; IQR = (p75 - p25) / median, a spread that a few long outliers leave alone"
    tool = cfg["policy"].get("imported_from")
    if timing_of(meta) == NCCL_TESTS_PER_ITERATION:
        return ["# timing: imported from nccl-tests -I 1: each iteration between CUDA events on a stream the host "
                "keeps filling, the slowest GPU's; time = median (p50) over the iterations (the -K skipped left out); "
                "GB/s = 1e9 B/s", spread]
    if tool:
        how = ("a loop of back-to-back calls, the time per call averaged over the ranks" if timing_of(meta) == "loop"
               else "each call alone between barriers, each rank's own mean averaged over the ranks")
        return [f"# timing: imported from {tool}: {how}; one figure per size (min = p99 = time, CV = IQR = 0 "
                f"where the tool prints no spread); GB/s = 1e9 B/s"]
    if cfg["op"] in ("p2p", "copy"):  # pair tests and copies: their commands' pages say more
        if cfg["policy"].get("timing") == "loop":
            return ["# timing: loop (nccl-tests'): N iterations back to back between two timestamps; time = the time "
                    "per iteration, the pair's slower side, median over the loops; GB/s = 1e9 B/s",
                    "# CV = stdev / mean and IQR = (p75 - p25) / median over the loops"]
        return ["# time = median (p50) over iterations of the slowest rank's time; GB/s = 1e9 B/s", spread]
    if cfg["policy"].get("timing") == "loop":
        return ["# timing: loop (nccl-tests'): after a barrier, N calls back to back between two timestamps; "
                "time = time per call averaged over the ranks (nccl-tests' -a 1), median over the loops; "
                "min = the fastest loop; slowest = the slowest rank's time per call; GB/s = 1e9 B/s",
                "# CV = stdev / mean and IQR = (p75 - p25) / median over the loops"]
    where = (", on the device (the stream held while the call is enqueued, so no launch latency)"
             if cfg.get("device") == "cuda" else "")
    return [f"# timing: per-iteration: each iteration one call after a barrier, timed alone{where}; time = median (p50) "
            f"over iterations of the slowest rank's time; GB/s = 1e9 B/s; nccl-tests times loops of back-to-back "
            f"calls instead (the collectives' --timing loop), OSU averages each rank's own time", spread]


def gpu_lines(cfg: dict) -> list[str]:
    """A GPU run's GPUs: the libraries, each rank's GPU, and the shared-GPU functional test named."""
    if not cfg.get("gpus"):
        return []
    lines = [f"# GPUs: {cfg['cuda_versions']}"]
    lines += [f"#   rank {g['rank']}: {g['host']} cuda:{g['device']} {g['name']} ({g['uuid']}){_cpus(g)}" for g in cfg["gpus"]]
    if cfg.get("shared_gpu"):
        uuids = {(g["host"], g["uuid"]) for g in cfg["gpus"]}
        lines.append(f"# shared GPU: {len(cfg['gpus'])} ranks on {len(uuids)} GPU(s) (COMMBENCH_SHARED_GPU: NCCL over "
                     f"sockets, each rank its own NCCL host): a functional test; the times are not the GPU's, and "
                     f"nothing is judged on them")
    return lines


def render_numerics(doc: dict, options) -> str:
    """A numerics result as its run printed it."""
    return "\n".join(numerics.header(doc) + numerics_lines(doc)) + "\n"


def numerics_lines(doc: dict) -> list[str]:
    """A numerics result's table: '#' header lines, then one line per row."""
    body = [numerics.cells(r) for r in numerics.ordered(doc)]
    widths = [max(len(c) for c in column) for column in zip(numerics.COLUMNS, numerics.UNITS, *body)]
    return (["#", "#" + _line(numerics.COLUMNS, widths)[1:], "#" + _line(numerics.UNITS, widths)[1:]]
            + [_line(c, widths) for c in body])


def _line(cells, widths) -> str:
    return " ".join(str(c).rjust(w) for c, w in zip(cells, widths))


def _groups(widths) -> str:
    """The line above a --place both table's column names, as nccl-tests marks its halves: each
    placement's name centred over its columns."""
    cut = [sum(w + 1 for w in widths[:i]) for i in (5, 9, 13, 17, 21)]
    line = ""
    for (start, end), name in zip(zip(cut, cut[1:]), PLACEMENTS * 2):
        line = line.ljust(start) + name.center(end - start)
    return "#" + line.rstrip()[1:]


def block_header(impl: str, description: str, widths=None, loop: bool = False, paired: bool = False,
                 choice: bool = False, overlap: bool = False) -> list[str]:
    # The column names' first character gives way to '#', as nccl-tests marks its header lines.
    columns = LOOP_COLUMNS if loop else COLUMNS
    lines = ["#", f"# impl {impl}: {description}"]
    if paired:
        columns, units = both(columns, columns), both(UNITS, UNITS)
        widths = widths or BOTH_WIDTHS
        lines.append(_groups(widths))
    else:
        units, widths = UNITS, widths or DEFAULT_WIDTHS
    if choice:
        columns, units, widths = (*columns, CHOICE), (*units, ""), (*widths, CHOICE_WIDTH)
    if overlap:
        halves = 2 if paired else 1
        columns, units, widths = (*columns, *OVERLAP * halves), (*units, *OVERLAP_UNITS * halves), \
            (*widths, *OVERLAP_WIDTHS * halves)
    return lines + ["#" + _line(columns, widths)[1:].rstrip(), "#" + _line(units, widths)[1:].rstrip()]


def _num(x: Optional[float], digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _spread(rec: dict) -> str:
    """IQR / median in percent. Files written before the IQR was recorded still hold the samples it
    comes from; a baseline saved without samples has neither."""
    t = rec["time_us"]
    q = t["iqr"] if "iqr" in t else iqr(rec["samples_us"]) if rec["samples_us"] else None
    return "n/a" if q is None or t["median"] <= 0 else f"{100 * q / t['median']:.1f}"


def cells(rec: dict) -> tuple:
    """One record's row, as text per column."""
    t = rec["time_us"]
    return (str(rec["size_bytes"]), str(rec["count"]), rec["dtype"], rec.get("redop", "none"), str(rec.get("root", -1)),
            _num(t["median"]), _num(rec["algbw_gbps"]), _num(rec["busbw_gbps"]), str(rec["wrong"]),
            _num(t["min"]), _num(rec["rank_max_us"] if "rank_max_us" in rec else t["p99"]), f"{100 * t['cv']:.1f}",
            _spread(rec))


def paired_cells(out: Optional[dict], inp: Optional[dict]) -> tuple:
    """A --place both row of a size's out-of-place and in-place records (either may be None)."""
    halves = [cells(r) if r else None for r in (out, inp)]
    head = next(h for h in halves if h)[HEAD]
    return both(*(head + MISSING + MISSING if h is None else h for h in halves))


def row(rec: dict, widths=DEFAULT_WIDTHS, choice: bool = False) -> str:
    line, widths = cells(rec), tuple(widths)
    if choice:
        line, widths = (*line, choice_cell(rec)), (*widths, CHOICE_WIDTH)
    if "overlap_pct" in rec:
        line, widths = (*line, *overlap_cells(rec)), (*widths, *OVERLAP_WIDTHS)
    return _line(line, widths)


def paired_row(out: Optional[dict], inp: Optional[dict], widths=None, choice: bool = False) -> str:
    line, widths = paired_cells(out, inp), tuple(widths or BOTH_WIDTHS)
    if choice:
        line, widths = (*line, choice_cell(out or inp)), (*widths, CHOICE_WIDTH)
    if "overlap_pct" in (out or inp):
        line, widths = (*line, *overlap_cells(out), *overlap_cells(inp)), (*widths, *OVERLAP_WIDTHS * 2)
    return _line(line, widths)


def _widths(rows: list[tuple], defaults: tuple) -> tuple:
    """`defaults`, widened where a row's value is wider."""
    columns = list(zip(*rows)) or [()] * len(defaults)
    return tuple(max([w, *map(len, col)]) for w, col in zip(defaults, columns))


def widths_for(records: list[dict]) -> tuple:
    return _widths(list(map(cells, records)), DEFAULT_WIDTHS)


def pairs(records: list[dict]) -> Optional[list[tuple[Optional[dict], Optional[dict]]]]:
    """A series' records as (out-of-place, in-place) per size when it holds both placements of one
    collective (a --place both run, a nccl-tests import), else None."""
    found = {bool(r.get("in_place")) for r in records}
    if len(found) < 2:
        return None
    # A size can repeat (nccl-tests prints every size below one element per rank as 0): the k-th
    # out-of-place record of a size shares its row with the k-th in-place one.
    by_size: dict[int, tuple[list, list]] = {}
    for r in records:
        by_size.setdefault(r["size_bytes"], ([], []))[bool(r.get("in_place"))].append(r)
    return [p for size in sorted(by_size) for p in itertools.zip_longest(*by_size[size])]


_IN_PLACE = SERIES_FIELDS.index("in_place")


def _blocks(records: list[dict]) -> list[tuple[tuple, list[dict]]]:
    """(series key, records) of each block: a series, or a series' two placements side by side
    (under its key without in_place)."""
    merged: dict[tuple, list[tuple[tuple, list[dict]]]] = {}
    for key, recs in by_series(records).items():
        merged.setdefault(key[:_IN_PLACE] + (None,) + key[_IN_PLACE + 1:], []).append((key, recs))
    return [(key, parts[0][1] + parts[1][1]) if len(parts) == 2 else parts[0] for key, parts in merged.items()]


def render(doc: dict, options) -> str:
    lines = header(doc)
    blocks = [(key, recs, pairs(recs)) for key, recs in _blocks(doc["results"])]
    widths = widths_for(doc["results"])
    paired_widths = _widths([paired_cells(*p) for _, _, ps in blocks if ps for p in ps], BOTH_WIDTHS)
    for key, recs, paired in blocks:
        h, loop = series_head(key), any("rank_max_us" in r for r in recs)
        name = f"{h['op']} ({where(key)})"
        choice, overlap = shows_choice(doc, h["impl"]), shows_overlap(doc)
        if paired:
            lines += block_header(variant(h), name, paired_widths, loop=loop, paired=True, choice=choice, overlap=overlap)
            lines += [paired_row(*p, widths=paired_widths, choice=choice) for p in paired]
        else:
            lines += block_header(variant(h), name, widths, loop=loop, choice=choice, overlap=overlap)
            lines += [row(r, widths, choice) for r in recs]
    return "\n".join(lines) + "\n"


def _cpus(gpu: dict) -> str:
    """The CPUs a rank ran on beside its GPU's local ones (config.gpus, node/gpu.gpu_layout)."""
    if not gpu.get("cpus"):
        return ""
    if gpu.get("local") is False:
        return f", CPUs {gpu['cpus']}, none local to the GPU (its CPUs: {gpu['gpu_cpus']})"
    return f", CPUs {gpu['cpus']}" + (", local to the GPU" if gpu.get("local") else "")
