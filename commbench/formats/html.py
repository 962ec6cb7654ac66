"""html: the report of a run (report.py) as one HTML page: its facts, the fit table with verdicts,
and one table of records per series."""

from __future__ import annotations

import html

from . import numerics, report

SUMMARY = "the report as one HTML page"
BINARY = False
SAMPLES = False

_STYLE = ("body{font-family:sans-serif;max-width:1200px;margin:auto}table{border-collapse:collapse}"
          "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}")


def table(rows: list[list[str]]) -> list[str]:
    def cells(row, tag):
        return "".join(f"<{tag}>{html.escape(c)}</{tag}>" for c in row)
    return ["<table>", f"<tr>{cells(rows[0], 'th')}</tr>"] + [f"<tr>{cells(r, 'td')}</tr>" for r in rows[1:]] + ["</table>"]


def _head(title: str, facts: list[tuple[str, str]], options) -> list[str]:
    """The page up to its first section: the title, the facts and the plot."""
    page = [f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>",
            f"<style>{_STYLE}</style></head><body>", f"<h1>{title}</h1>", "<ul>"]
    page += [f"<li><b>{html.escape(k)}</b>: {html.escape(v)}</li>" for k, v in facts]
    page.append("</ul>")
    if options.image:
        page.append(f"<img src='{html.escape(options.image)}' width='100%'>")
    return page


def render_numerics(doc: dict, options) -> str:
    page = _head(numerics.TITLE, report.numerics_facts(doc, options.source), options)
    page += [f"<h2>{html.escape(numerics.SECTION)}</h2>"] + [f"<p>{html.escape(line)}.</p>" for line in numerics.LEGEND]
    page += table(numerics.table(doc))
    return "\n".join(page + ["</body></html>"]) + "\n"


def render(doc: dict, options) -> str:
    page = _head(report.TITLE, report.facts(doc, options.source), options)
    page += ["<h2>Fit and verdicts</h2>"] + table(report.fit_table(doc, options)) + ["<h2>Records</h2>"]
    for name, rows in report.record_tables(doc):
        page += [f"<h3>{html.escape(name)}</h3>"] + table(rows)
    return "\n".join(page + ["</body></html>"]) + "\n"
