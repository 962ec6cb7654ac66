"""A report of one run: what it says (the facts of the run, the fit table with verdicts, the records
by series) as rows of text, which the markdown and html formats lay out; and the report folder that
`commbench report` writes: report.md and report.html beside the plot they show."""

from __future__ import annotations

import os
from typing import Optional

from . import formats
from .fabrics import Expectation
from .fitreport import fits_with_verdicts
from .formats import console
from .formats.series import by_series, label
from .results import write_new
from .sizes import format_size

TITLE = "commbench report"
PLOT = "plot.png"


def facts(doc: dict, source: str) -> list[tuple[str, str]]:
    m, cfg = doc["machine"], doc["config"]
    return [("run", source), ("created", doc["created"]), ("command", " ".join(doc["argv"])),
            ("hosts", ", ".join(m["hosts"])), ("ranks", str(m["ranks"])), ("CPU", m["cpu_model"]),
            ("MPI", str(m["mpi"])), ("torch", m["torch"]), ("op / dtype", f"{cfg['op']} / {cfg['dtype']}"),
            ("wrong elements", str(sum(r["wrong"] for r in doc["results"])))]


def fit_table(doc: dict, options: formats.Options) -> list[list[str]]:
    """The header row, then one row per series: its fit and its verdict against options.expected."""
    rows = [["op", "impl", "ranks", "alpha (us)", "bandwidth (GB/s)", "95% CI (GB/s)", "R²", "segments",
             "expected", "verdict"]]
    for f in fits_with_verdicts(doc["results"], options.expected, options.pass_pct, options.fail_pct):
        if "skipped" in f:
            rows.append([f["op"], f["impl"], str(f["ranks"]), "", "", "", "", "", "", f"no fit: {f['skipped']}"])
            continue
        top = f["segments"][-1]
        ci = top["bandwidth_gbps_ci"]
        segs = "; ".join(f"{format_size(s['size_min'])}-{format_size(s['size_max'])}" for s in f["segments"])
        exp = f.get("expected")
        rows.append([f["op"], f["impl"] + (" (effective)" if f["effective"] else ""), str(f["ranks"]),
                     f"{f['alpha_us']:.3g}", "latency-bound" if f["bandwidth_gbps"] is None else f"{f['bandwidth_gbps']:.3g}",
                     f"{ci[0]:.3g} – {ci[1]:.3g}" if ci else "", f"{top['r2']:.3f}", segs,
                     f"{exp['bandwidth_gbps']:.3g} GB/s ({exp['fabric']})" if exp else "",
                     (f"{f['verdict']} ({f['percent_of_expected']:.0f}%)" if f.get("percent_of_expected") is not None
                      else f.get("verdict", ""))])
    return rows


def record_tables(doc: dict) -> list[tuple[str, list[list[str]]]]:
    """Per series, its name and the console table's rows (header row first: name and unit)."""
    head = [f"{c} {u}".strip() for c, u in zip(console.COLUMNS, console.UNITS)]
    return [(label(key), [head] + [list(console.cells(r)) for r in recs])
            for key, recs in by_series(doc["results"]).items()]


def write_report(run_path: str, doc: dict, out_dir: str, expected: Optional[Expectation], pass_pct: float,
                 fail_pct: float) -> list[str]:
    """Writes the plot, report.md and report.html into out_dir (new files only); returns their paths."""
    options = formats.Options(source=os.path.basename(run_path), expected=expected, pass_pct=pass_pct,
                              fail_pct=fail_pct, image=PLOT)
    written = []
    for name, fmt in ((PLOT, "png"), ("report.md", "markdown"), ("report.html", "html")):
        path = os.path.join(out_dir, name)
        write_new(path, formats.get(fmt).render(doc, options), f"{path} exists")
        written.append(path)
    return written
