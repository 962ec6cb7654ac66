"""A Markdown and HTML report of one run: what ran where, the plot, the fit table with verdicts."""

from __future__ import annotations

import html
import os
from typing import Optional

from .fabrics import Expectation
from .fitreport import fits_with_verdicts
from .plot import plot
from .results import write_new
from .sizes import format_size


def _fit_table(fits: list[dict]) -> list[list[str]]:
    rows = [["op", "impl", "ranks", "alpha (us)", "bandwidth (GB/s)", "95% CI (GB/s)", "R²", "segments",
             "expected", "verdict"]]
    for f in fits:
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


def write_report(run_path: str, doc: dict, out_dir: str, expected: Optional[Expectation], pass_pct: float,
                 fail_pct: float) -> list[str]:
    if os.path.exists(os.path.join(out_dir, "report.md")):
        from .errors import CommbenchError
        raise CommbenchError(f"{out_dir} already holds a report; choose another -o")
    os.makedirs(out_dir, exist_ok=True)
    png = os.path.join(out_dir, "plot.png")
    plot([(os.path.basename(run_path), doc)], png, expected=expected)
    fits = fits_with_verdicts(doc["results"], expected, pass_pct, fail_pct)
    table = _fit_table(fits)
    m, cfg = doc["machine"], doc["config"]
    facts = [("run", os.path.basename(run_path)), ("created", doc["created"]), ("command", " ".join(doc["argv"])),
             ("hosts", ", ".join(m["hosts"])), ("ranks", str(m["ranks"])), ("CPU", m["cpu_model"]),
             ("MPI", str(m["mpi"])), ("torch", m["torch"]), ("op / dtype", f"{cfg['op']} / {cfg['dtype']}"),
             ("wrong elements", str(sum(r["wrong"] for r in doc["results"])))]
    md = ["# commbench report", ""] + [f"- **{k}**: {v}" for k, v in facts] + ["", "![plot](plot.png)", "",
                                                                                "## Fit and verdicts", ""]
    md.append("| " + " | ".join(table[0]) + " |")
    md.append("|" + "---|" * len(table[0]))
    md += ["| " + " | ".join(r) + " |" for r in table[1:]]
    write_new(os.path.join(out_dir, "report.md"), "\n".join(md) + "\n", f"{out_dir}/report.md exists")
    cells = lambda r, tag: "".join(f"<{tag}>{html.escape(c)}</{tag}>" for c in r)  # noqa: E731
    page = ["<!doctype html><html><head><meta charset='utf-8'><title>commbench report</title>",
            "<style>body{font-family:sans-serif;max-width:1200px;margin:auto}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}</style></head><body>",
            "<h1>commbench report</h1><ul>"] + [f"<li><b>{html.escape(k)}</b>: {html.escape(v)}</li>" for k, v in facts]
    page += ["</ul><img src='plot.png' width='100%'><h2>Fit and verdicts</h2><table>",
             f"<tr>{cells(table[0], 'th')}</tr>"] + [f"<tr>{cells(r, 'td')}</tr>" for r in table[1:]] + ["</table></body></html>"]
    write_new(os.path.join(out_dir, "report.html"), "\n".join(page) + "\n", f"{out_dir}/report.html exists")
    return [png, os.path.join(out_dir, "report.md"), os.path.join(out_dir, "report.html")]
