"""What an accept run leaves beside its steps' files: summary.json (everything, for programs),
summary.md and summary.html (for people), and JUnit XML (one testcase per step, for CI), each
written whole or not at all."""

from __future__ import annotations

import contextlib
import html
import os
import re

from ..errors import CommbenchError
from ..formats.html import table
from ..results.document import replace_whole, write_new
from .judge import ERROR, FAIL, TIMEOUT


def _lines(step: dict) -> list[str]:
    return [f"{c['status']} {c['check']}: {c['evidence']}" for c in step["checks"]] + step.get("envelopes", [])


def headline(summary: dict) -> str:
    counts = {}
    for s in summary["steps"]:
        counts[s["status"]] = counts.get(s["status"], 0) + 1
    tally = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no step ended"
    if summary.get("interrupted"):
        tally = f"interrupted; {tally}"
    return (f"accept {summary['plan']} on {summary['host']}: {summary['status']} ({tally}; "
            f"{summary['seconds']:.0f} s)")


def write_json(summary: dict, path: str) -> None:
    write_new(path, summary, f"{path} already exists")


def markdown(summary: dict) -> str:
    out = [f"# {headline(summary)}", "", summary["description"], "",
           f"- SKU: {summary['sku']}", f"- plan: {summary['plan_source']}",
           f"- baselines: {summary['baselines'] or 'none given'}", "",
           "| step | verdict | counted | seconds | baseline | evidence |", "|---|---|---|---|---|---|"]
    for s in summary["steps"]:
        worst = [c for c in s["checks"] if c["status"] == s["status"]] or s["checks"]
        evidence = (worst[0]["evidence"] if worst else "").replace("|", "\\|")
        out.append(f"| {s['step']} | {s['status']} | {'yes' if s['counted'] else 'no'} | {s['seconds']:.1f} | "
                   f"{os.path.basename(s['baseline']) if s['baseline'] else '-'} | {evidence} |")
    for s in summary["steps"]:
        out += ["", f"## {s['step']}: {s['status']}", "", f"`{s['command_line']}`", "", f"- {s['baseline_note']}"]
        out += [f"- {line}" for line in _lines(s)]
    return "\n".join(out) + "\n"


def html_page(summary: dict) -> str:
    title = html.escape(headline(summary))
    page = [f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>",
            "<style>body{font-family:sans-serif;max-width:1200px;margin:auto}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}</style></head><body>",
            f"<h1>{title}</h1>", f"<p>{html.escape(summary['description'])}</p>",
            f"<p>SKU: {html.escape(summary['sku'])}</p>"]
    rows = [["step", "verdict", "counted", "seconds", "baseline"]]
    rows += [[s["step"], s["status"], "yes" if s["counted"] else "no", f"{s['seconds']:.1f}",
              os.path.basename(s["baseline"]) if s["baseline"] else "-"] for s in summary["steps"]]
    page += table(rows)
    for s in summary["steps"]:
        page += [f"<h2>{html.escape(s['step'])}: {s['status']}</h2>", f"<pre>{html.escape(s['command_line'])}</pre>",
                 "<ul>", f"<li>{html.escape(s['baseline_note'])}</li>"]
        page += [f"<li>{html.escape(line)}</li>" for line in _lines(s)] + ["</ul>"]
    return "\n".join(page + ["</body></html>"]) + "\n"


def junit(summary: dict, path: str) -> None:
    """One testsuite, one testcase per step: a FAIL is a failure, an ERROR or TIMEOUT an error (the
    step could not show the node good), each with the evidence as message; a step that is not
    counted passes, its findings in its output. Every check is in the testcase's system-out."""
    from junitparser import Error, Failure, JUnitXml, Skipped, TestCase, TestSuite

    suite = TestSuite(f"commbench accept {summary['plan']} on {summary['host']}")
    suite.hostname = summary["host"]
    suite.timestamp = summary["started"]
    for s in summary["steps"]:
        case = TestCase(_xml_text(s["step"]), f"commbench.accept.{summary['plan']}", s["seconds"])
        bad = [c for c in s["checks"] if c["status"] == s["status"]]
        message = _xml_text(bad[0]["evidence"] if bad else s["status"])
        if s["counted"] and s["status"] == FAIL:
            case.result = [Failure(message, "FAIL")]
        elif s["counted"] and s["status"] in (ERROR, TIMEOUT):
            case.result = [Error(message, s["status"])]
        case.system_out = _xml_text("\n".join([s["command_line"], s["baseline_note"], *_lines(s)]) + "\n")
        suite.add_testcase(case)
        for c in s["checks"]:
            for host, verdict in (c.get("hosts") or {}).items():
                suite.add_testcase(_host_case(summary, s, c["check"], host, verdict))
    # A Ctrl-C: the run is no pass, whatever its finished steps said; the steps it did not reach are skipped.
    if summary["interrupted"]:
        case = TestCase("interrupted", f"commbench.accept.{summary['plan']}", 0)
        case.result = [Error("the run was interrupted before its last step", "INTERRUPTED")]
        suite.add_testcase(case)
    for name in summary["not_run"]:
        case = TestCase(_xml_text(name), f"commbench.accept.{summary['plan']}", 0)
        case.result = [Skipped("not run: the run was interrupted")]
        suite.add_testcase(case)
    suite.update_statistics()
    suite.time = round(summary["seconds"], 1)  # the whole run's, set-up between steps included
    xml = JUnitXml()
    xml.add_testsuite(suite)
    # The root's counts set one by one: JUnitXml.update_statistics() would sum the suite's time anew
    # and add a `skipped` count, which the schema CI readers publish (Jenkins' junit-10.xsd) refuses there.
    xml.tests, xml.failures, xml.errors, xml.time = suite.tests, suite.failures, suite.errors, suite.time
    try:
        replace_whole(path, xml.tostring().decode())  # over its reservation (reserve_junit)
    except OSError as e:
        raise CommbenchError(f"cannot write {path}: {e.strerror}") from None


def reserve_junit(path: str) -> None:
    """--junit's file, made empty before the first step: an accept that names a file another one took
    is refused before it runs anything, not after every step. junit() replaces it whole."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        raise CommbenchError(f"{path} already exists; choose another --junit") from None
    except OSError as e:
        raise CommbenchError(f"cannot write {path}: {e.strerror}") from None


def release_junit(path: str) -> None:
    """The reservation gone where nothing was written into it (a run that ended before its summary)."""
    with contextlib.suppress(OSError):
        if os.path.getsize(path) == 0:
            os.unlink(path)


def _host_case(summary: dict, step: dict, check: str, host: str, verdict: str):
    """A host's own test case beside its step's (links at host level): `<check>/<host>`, a failure
    where the host FAILs and the step is counted, the verdict line as output."""
    from junitparser import Failure, TestCase
    case = TestCase(_xml_text(f"{check}/{host}"), f"commbench.accept.{summary['plan']}.{_xml_text(step['step'])}", 0)
    if step["counted"] and verdict != "PASS":
        case.result = [Failure(_xml_text(verdict.removeprefix("FAIL ")), "FAIL")]
    case.system_out = _xml_text(f"{host} | {verdict}\n")
    return case


# Characters XML 1.0 cannot hold (a step's last line may carry a terminal's colour codes).
_NOT_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml_text(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def write_all(summary: dict, folder: str, junit_path) -> None:
    """Every output, each tried whatever became of the others (the run folder's disk may be full
    where --junit's is not, and JUnit is what a CI reads); then the first failure is raised."""
    writes = [lambda: junit(summary, junit_path)] if junit_path else []
    writes += [lambda: write_json(summary, os.path.join(folder, "summary.json")),
               lambda: write_new(os.path.join(folder, "summary.md"), markdown(summary), "summary.md already exists"),
               lambda: write_new(os.path.join(folder, "summary.html"), html_page(summary), "summary.html already exists")]
    failed = []
    for write in writes:
        try:
            write()
        except CommbenchError as e:
            failed.append(e)
    if failed:
        raise failed[0]

