"""markdown: the report of a run (report.py) as Markdown: its facts, the fit table with verdicts,
and one table of records per series."""

from __future__ import annotations

from . import numerics, report

SUMMARY = "a report: the run's facts, fits with verdicts, and the records of each series"
BINARY = False
SAMPLES = False


def _table(rows: list[list[str]]) -> list[str]:
    # A '|' inside a cell would end it.
    lines = ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    return lines[:1] + ["|" + "---|" * len(rows[0])] + lines[1:]


def render(doc: dict, options) -> str:
    md = [f"# {report.TITLE}", ""] + [f"- **{k}**: {v}" for k, v in report.facts(doc, options.source)] + [""]
    if options.image:
        md += [f"![plot]({options.image})", ""]
    md += ["## Fit and verdicts", ""] + _table(report.fit_table(doc, options)) + ["", "## Records"]
    for name, rows in report.record_tables(doc):
        md += ["", f"### {name}", ""] + _table(rows)
    return "\n".join(md) + "\n"


def render_numerics(doc: dict, options) -> str:
    md = [f"# {numerics.TITLE}", ""] + [f"- **{k}**: {v}" for k, v in report.numerics_facts(doc, options.source)] + [""]
    if options.image:
        md += [f"![plot]({options.image})", ""]
    md += [f"## {numerics.SECTION}", ""] + [f"{line}." for line in numerics.LEGEND] + [""] + _table(numerics.table(doc))
    return "\n".join(md) + "\n"
