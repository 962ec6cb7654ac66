"""A report of one run: what it says (the facts of the run, the fit table with verdicts, the records
by series) as rows of text, which the markdown and html formats lay out."""

from __future__ import annotations

import shlex

from ..analysis import envelopes, nccl_default, stragglers
from ..analysis.verdicts import fits_with_verdicts, span
from ..node.machine import typed_command
from ..results.document import timing_of
from ..results.memo import for_the_last_records
from ..results.series import by_series, label, variant
from . import console
from .options import Options

TITLE = "commbench report"
PLOT = "plot.png"


def numerics_facts(doc: dict, source: str) -> list[tuple[str, str]]:
    """A numerics result's facts: the run's (no elements are counted wrong there), then its data."""
    n = doc["numerics"]
    return [f for f in facts(doc, source) if f[0] != "wrong elements"] + [
        ("data", f"{n['data']}, seed {n['seed']}: {n['contributions']} contributions of {n['count']} elements"),
        ("rank counts", ", ".join(map(str, n["ranks"]))), ("calls per row", str(n["repeats"]))]


def facts(doc: dict, source: str) -> list[tuple[str, str]]:
    m, cfg = doc["machine"], doc["config"]
    return [("run", source), ("created", doc["created"]), ("command", shlex.join(typed_command(doc["argv"]))),
            ("hosts", ", ".join(m["hosts"])), ("ranks", str(m["ranks"])), ("CPU", m["cpu_model"]),
            ("MPI", str(m["mpi"])), ("torch", m["torch"]), ("op / dtype", f"{cfg['op']} / {cfg['dtype']}"),
            ("timing", timing_of(doc)),
            ("wrong elements", str(sum(r["wrong"] for r in doc["results"])))] + \
        ([("delay", stragglers.delay_text(cfg["delay"], cfg.get("agg", 1)))] if cfg.get("delay") else []) + \
        [("straggler", line.partition(": ")[2]) for line in stragglers.summary_lines(doc)] + \
        [("NCCL's default", line.strip()) for line in nccl_default.summary_lines(doc)] + \
        [("NCCL refuses", f"{name}: {said}") for name, said in doc.get("nccl_refused", {}).items()] + \
        [("envelope", line.strip()) for line in envelopes.lines(doc)]


FIT_HEADER = ["op", "impl", "ranks", "alpha (us)", "alpha from", "bandwidth (GB/s)", "95% CI (GB/s)",
              "bandwidth from", "segments", "expected", "verdict"]


def _source(f: dict, sizes: list[int]) -> str:
    """The sizes of the segment a headline figure comes from, and how well the line fits them."""
    [seg] = [s for s in f["segments"] if [s["size_min"], s["size_max"]] == sizes]
    return f"{span(sizes)} (R² {seg['r2']:.3f})"


def fit_table(doc: dict, options: Options) -> list[list[str]]:
    """The header row, then one row per series: its fit, the segments its alpha and bandwidth come
    from (latency from the smallest sizes, bandwidth from the largest), and its verdict against
    options.expected."""
    rows = [FIT_HEADER]
    for f in fits_with_verdicts(doc["results"], options.expected, options.pass_pct, options.fail_pct):
        if "skipped" in f:
            rows.append([f["op"], variant(f), str(f["ranks"])] + [""] * (len(FIT_HEADER) - 4)
                        + [f"no fit: {f['skipped']}"])
            continue
        ci = f["bandwidth_gbps_ci"]
        segs = "; ".join(span([s["size_min"], s["size_max"]]) for s in f["segments"])
        exp = f.get("expected")
        rows.append([f["op"], variant(f) + (" (effective)" if f["effective"] else ""), str(f["ranks"]),
                     f"{f['alpha_us']:.3g}", _source(f, f["alpha_segment"]),
                     "latency-bound" if f["bandwidth_gbps"] is None else f"{f['bandwidth_gbps']:.3g}",
                     f"{ci[0]:.3g} – {ci[1]:.3g}" if ci else "", _source(f, f["bandwidth_segment"]), segs,
                     f"{exp['bandwidth_gbps']:.3g} GB/s ({exp['fabric']})" if exp else "",
                     (f"{f['verdict']} ({f['percent_of_expected']:.0f}%)" if f.get("percent_of_expected") is not None
                      else f.get("verdict", ""))])
    return rows


def record_tables(doc: dict) -> list[tuple[str, list[list[str]]]]:
    """Per series, its name and the console table's rows (header row first: name and unit)."""
    return _tables(doc["results"])


@for_the_last_records  # a report's HTML and Markdown show the same tables
def _tables(records: list[dict]) -> list[tuple[str, list[list[str]]]]:
    head = [f"{c} {u}".strip() for c, u in zip(console.COLUMNS, console.UNITS)]
    return [(label(key), [head] + [list(console.cells(r)) for r in recs]) for key, recs in by_series(records).items()]
