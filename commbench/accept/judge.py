"""A step's verdict from what it left: each check PASS, WARN or FAIL with its evidence (the figure,
the reference's figure, the limit), and the step's status the worst of them. A step that did not
finish, or left no file to judge, is an ERROR (TIMEOUT at its limit): the node was not shown good."""

from __future__ import annotations

from typing import Optional

from ..analysis.compare import compare
from ..analysis.fabrics import expectation
from ..analysis.verdicts import fits_with_verdicts
from ..errors import CommbenchError
from ..results.series import by_series, series_head, variant
from ..sizes import format_size

PASS, WARN, FAIL, ERROR, TIMEOUT = "PASS", "WARN", "FAIL", "ERROR", "TIMEOUT"
ORDER = {PASS: 0, WARN: 1, FAIL: 2, ERROR: 3, TIMEOUT: 3}


def check(name: str, status: str, evidence: str, **figures) -> dict:
    return {"check": name, "status": status, "evidence": evidence, **figures}


def worst(checks: list[dict]) -> str:
    return max((c["status"] for c in checks), key=ORDER.__getitem__, default=PASS)


def _who(h: dict) -> str:
    return f"{h['op']} {variant(h)} ({h['ranks']} ranks" + (f", pair {h['pair'][0]}-{h['pair'][1]})" if h.get("pair") else ")")


def result_checks(doc: dict, limits: dict, baseline: Optional[tuple[str, dict]], said: str = "") -> list[dict]:
    """The checks of a result file: it finished, every element was right, and, where the plan or a
    baseline gives one, its figures against the baseline, the fabric and the absolute limits.
    `said`: the step's last line, the reason where the file could not record one (its last write
    failed: a full disk)."""
    out = []
    if doc["status"] != "complete":
        reason = doc.get("error") or (f"its file records no reason; the step said: {said}" if said else
                                      "no reason recorded")
        out.append(check("finished", FAIL, f"the run ended {doc['status']}: {reason}"))
    wrong = [r for r in doc["results"] if r.get("wrong")]
    if wrong:
        first = wrong[0]
        out.append(check("correct", FAIL, f"{sum(r['wrong'] for r in wrong)} wrong element(s) in {len(wrong)} record(s), "
                                          f"first {_who(first)} at {format_size(first['size_bytes'])}"))
    else:
        out.append(check("correct", PASS, f"every element of {len(doc['results'])} record(s) exact"))
    if doc.get("links", {}).get("level") == "host":
        verdicts = doc["links"]["verdicts"]
        failed = [f"{h} | {v}" for h, v in verdicts.items() if v != "PASS"]
        # Each host's verdict goes along: JUnit makes a test case of each (outputs.junit).
        out.append(check("links", FAIL if failed else PASS,
                         "; ".join(failed) or f"every one of {len(verdicts)} hosts PASS", hosts=verdicts))
    elif "links" in doc:
        findings = doc["links"]["findings"]
        out.append(check("links", FAIL if findings else PASS,
                         "; ".join(f["text"] for f in findings) or "no slow link, rank or host found"))
    if "host_copies" in doc:  # copy --src all
        findings = doc["host_copies"]["findings"]
        out.append(check("host copies", FAIL if findings else PASS,
                         "; ".join(f["text"] for f in findings) or "no GPU's host copies fall behind the others'"))
    out += _scaling_checks(doc, limits)
    out += _baseline_checks(doc, limits, baseline)
    out += _fabric_checks(doc, limits)
    out += _absolute_checks(doc, limits)
    return out


def _scaling_checks(doc: dict, limits: dict) -> list[dict]:
    """scale's answer per impl: its verdict as evidence, judged where the plan sets the least
    efficiency at the largest rank count measured (a prediction beyond it is said, not judged)."""
    out = []
    for a in doc.get("scale") or []:
        # A row of a measured count whose communication the sweep did not reach (--grad-bytes beyond
        # its sizes) holds a prediction: judged are the times measured.
        measured = [r for r in a["rows"] if r["measured"] and r["comm_ms"] is not None and r["efficiency"] is not None]
        if not measured:
            continue
        last = measured[-1]
        evidence = (f"{a['op']} {a['impl']}: {100 * last['efficiency']:.1f}% efficiency at {last['ranks']} rank(s) "
                    f"({a['workload_text']}); {a['verdict']}")
        least = limits.get("min_efficiency_pct")
        if least is None:
            out.append(check("scaling", PASS, evidence, figure=last["efficiency"]))
        else:
            out.append(check("scaling", PASS if 100 * last["efficiency"] >= least else FAIL,
                             f"{evidence} (limit >= {least:g}%)", figure=last["efficiency"], limit=least / 100))
    return out


def _baseline_checks(doc: dict, limits: dict, baseline: Optional[tuple[str, dict]]) -> list[dict]:
    if baseline is None:
        return []
    path, base = baseline
    tol_bw, tol_lat = limits["tolerance_bw_pct"] / 100, limits["tolerance_lat_pct"] / 100
    try:
        found = compare(base, doc, tol_bw, tol_lat)
    except CommbenchError as e:
        return [check("baseline", FAIL, f"cannot be compared with {path}: {e}")]
    out = []
    for s in found["series"]:
        # The measured sizes decide. The fitted alpha and bandwidth (compare shows them) swing more
        # than the medians they come from: on the development VM they passed their limits in one
        # healthy rerun in three, which would make a WARN the normal state of a good node.
        for c in (c for c in s["checks"] if c["check"].endswith("sizes")):
            rows = [r for r in s["rows"] if r["region"] == c["check"].split()[0]]  # never empty
            latency = c["check"].startswith("latency")
            if latency:  # the size whose time rose most
                r = max(rows, key=lambda r: r["time_change"])
                detail = f"{r['run_time_us']:.2f} us against {r['base_time_us']:.2f} us"
            else:  # the size whose bandwidth fell most
                r = min(rows, key=lambda r: r["bw_change"])
                detail = f"{r['run_bw_gbps']:.3g} GB/s against {r['base_bw_gbps']:.3g} GB/s"
            warn = limits.get("warn_lat_pct" if latency else "warn_bw_pct")
            warned = warn is not None and (c["change"] > warn / 100 if latency else c["change"] < -warn / 100)
            band = f", WARN beyond {'+' if latency else '-'}{warn:g}%" if warn is not None else ""
            out.append(check(f"baseline {c['check']}", FAIL if c["regression"] else WARN if warned else PASS,
                             f"{_who(s)}: {c['check']} {c['change']:+.1%} against the baseline (limit {c['tolerance']:+.0%}"
                             f"{band}); at {format_size(r['size_bytes'])} {detail}",
                             change=c["change"], limit=c["tolerance"], baseline=path))
    if not out:
        out.append(check("baseline", WARN, f"{path} shares no size of a judged region with the run"))
    # Versions are facts, not keys: said, not judged. A topology that differs within one SKU (a
    # link, a port or a NUMA layout) is worth a look.
    topology = [w for w in found["warnings"] if w.startswith("topology fingerprint")]
    facts = [w for w in found["warnings"] if w not in topology]
    if topology:
        out.append(check("baseline topology", WARN, f"{topology[0]}: the node's topology is not its baseline's "
                                                    f"(see topo --json of both)"))
    if facts:
        out.append(check("baseline facts", PASS, "; ".join(facts)))
    return out


def _fabric_checks(doc: dict, limits: dict) -> list[dict]:
    if not limits.get("fabric"):
        return []
    try:
        expected = expectation(limits["fabric"], on_the_spot=doc.get("on_the_spot"), source="the step's result file")
    except CommbenchError as e:
        return [check("fabric", FAIL, str(e))]
    out = []
    for f in fits_with_verdicts(doc["results"], expected, limits["pass_pct"], limits["fail_pct"]):
        if "verdict" not in f:
            continue
        pct = f["percent_of_expected"]
        out.append(check(f"fabric {expected.name}", f["verdict"],
                         f"{_who(f)}: fitted {f['bandwidth_gbps'] or 0:.3g} GB/s = "
                         f"{pct if pct is not None else 0:.0f}% of {expected.bandwidth_gbps:.3g} GB/s expected "
                         f"(pass at {limits['pass_pct']:g}%, fail under {limits['fail_pct']:g}%, "
                         f"above 125% the expectation or the method is off)",
                         figure=f["bandwidth_gbps"], reference=expected.bandwidth_gbps))
    return out


def _absolute_checks(doc: dict, limits: dict) -> list[dict]:
    out = []
    for key, recs in by_series(doc["results"]).items():
        moved = [r for r in recs if r["size_bytes"] > 0]
        if not moved:
            continue
        who = _who(series_head(key))
        least, largest = moved[0], moved[-1]
        if "min_busbw_gbps" in limits:
            bw = largest["busbw_gbps"] if largest.get("busbw_gbps") is not None else largest["algbw_gbps"]
            out.append(check("busbw", PASS if bw >= limits["min_busbw_gbps"] else FAIL,
                             f"{who}: {bw:.3g} GB/s at {format_size(largest['size_bytes'])} (limit >= "
                             f"{limits['min_busbw_gbps']:g} GB/s)", figure=bw, limit=limits["min_busbw_gbps"]))
        if "max_time_us" in limits:
            t = least["time_us"]["median"]
            out.append(check("time", PASS if t <= limits["max_time_us"] else FAIL,
                             f"{who}: {t:.2f} us at {format_size(least['size_bytes'])} (limit <= {limits['max_time_us']:g} us)",
                             figure=t, limit=limits["max_time_us"]))
    return out


def doctor_checks(doc: Optional[dict]) -> list[dict]:
    """doctor's FAIL and WARN checks, each its own; one PASS when it found nothing."""
    if not doc:
        return [check("doctor", ERROR, "doctor left no verdict (see its log)")]
    found = [check(f"doctor {c['name']}", c["status"], c["evidence"] + (f" (remedy: {c['remedy']})" if c.get("remedy") else ""))
             for c in doc["checks"] if c["status"] != PASS]
    return found or [check("doctor", PASS, f"{len(doc['checks'])} check(s) passed")]
