"""console: the table a run prints as it goes, in nccl-tests' layout: header lines, then one block
per impl with one row per size. The live run (run/reporter.py) prints it line by line with these
functions; `export --format console` prints a whole result file the same way, one block per series.

Every cell is right-aligned in its column and one space from its neighbours, so values never run
together. A live run prints each row as it is measured, before the widest value is known: its
columns are as wide as any plausible value (DEFAULT_WIDTHS, e.g. 100 s in microseconds); a whole
file's columns widen further where a value needs it.
"""

from __future__ import annotations

from typing import Optional

from ..results.series import by_series, series_head, variant, where
from ..results.stats import iqr

SUMMARY = "the table a run prints: nccl-tests' layout, one block per series, CV and IQR beside the median"
BINARY = False
SAMPLES = False

COLUMNS = ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "min", "p99", "CV", "IQR")
# Loop timing has no per-iteration samples: its p99 column gives way to the slowest rank's time per call.
LOOP_COLUMNS = tuple("slowest" if c == "p99" else c for c in COLUMNS)
UNITS = ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(%)", "(%)")
DEFAULT_WIDTHS = (11, 11, 8, 5, 4, 11, 7, 7, 6, 11, 11, 6, 6)


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
        f"# impls: {', '.join(cfg['impls'])}; dtype {cfg['dtype']}; redop {cfg['redop']}; "
        + ("in-place" if cfg["in_place"] else "out-of-place"),
        *gpu_lines(cfg),
        *timing_lines(cfg),
    ]


def timing_lines(cfg: dict) -> list[str]:
    """What a row's figures are: the timing convention that made them (run/policy.py TIMINGS)."""
    spread = "# CV = stdev / mean; IQR = (p75 - p25) / median, a spread that a few long outliers leave alone"
    if cfg["op"] in ("p2p", "copy"):  # pair tests and copies: one convention, their commands' pages say it
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
    lines += [f"#   rank {g['rank']}: {g['host']} cuda:{g['device']} {g['name']} ({g['uuid']})" for g in cfg["gpus"]]
    if cfg.get("shared_gpu"):
        uuids = {(g["host"], g["uuid"]) for g in cfg["gpus"]}
        lines.append(f"# shared GPU: {len(cfg['gpus'])} ranks on {len(uuids)} GPU(s) (COMMBENCH_SHARED_GPU: NCCL over "
                     f"sockets, each rank its own NCCL host): a functional test; the times are not the GPU's, and "
                     f"nothing is judged on them")
    return lines


def _line(cells, widths) -> str:
    return " ".join(str(c).rjust(w) for c, w in zip(cells, widths))


def block_header(impl: str, description: str, widths=DEFAULT_WIDTHS, loop: bool = False) -> list[str]:
    # The column names' first character gives way to '#', as nccl-tests marks its header lines.
    columns = LOOP_COLUMNS if loop else COLUMNS
    return ["#", f"# impl {impl}: {description}", "#" + _line(columns, widths)[1:], "#" + _line(UNITS, widths)[1:]]


def _num(x: Optional[float], digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _spread(rec: dict) -> str:
    """IQR / median in percent. Files written before the IQR was recorded still hold the samples it
    comes from; a baseline saved without samples has neither."""
    t = rec["time_us"]
    q = t.get("iqr", iqr(rec["samples_us"]) if rec["samples_us"] else None)
    return "n/a" if q is None or t["median"] <= 0 else f"{100 * q / t['median']:.1f}"


def cells(rec: dict) -> tuple:
    """One record's row, as text per column."""
    t = rec["time_us"]
    return (str(rec["size_bytes"]), str(rec["count"]), rec["dtype"], rec.get("redop", "none"), str(rec.get("root", -1)),
            _num(t["median"]), _num(rec["algbw_gbps"]), _num(rec["busbw_gbps"]), str(rec["wrong"]),
            _num(t["min"]), _num(rec["rank_max_us"] if "rank_max_us" in rec else t["p99"]), f"{100 * t['cv']:.1f}",
            _spread(rec))


def row(rec: dict, widths=DEFAULT_WIDTHS) -> str:
    return _line(cells(rec), widths)


def widths_for(records: list[dict]) -> tuple:
    """DEFAULT_WIDTHS, widened where a record's value is wider."""
    columns = list(zip(*map(cells, records))) or [()] * len(COLUMNS)
    return tuple(max([w, *map(len, col)]) for w, col in zip(DEFAULT_WIDTHS, columns))


def render(doc: dict, options) -> str:
    widths = widths_for(doc["results"])
    lines = header(doc)
    for key, recs in by_series(doc["results"]).items():
        h = series_head(key)
        lines += block_header(variant(h), f"{h['op']} ({where(key)})", widths,
                              loop=any("rank_max_us" in r for r in recs))
        lines += [row(r, widths) for r in recs]
    return "\n".join(lines) + "\n"
