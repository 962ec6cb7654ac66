"""Other tools' outputs as commbench result files, so existing logs can be fitted, compared and
plotted: nccl-tests (its stdout table, or its -J JSON) and the OSU micro-benchmarks (stdout).

Those tools report one figure per size (an average), not per-iteration samples, so each imported
record has that one figure as its only sample; the fit's confidence intervals are then degenerate."""

from __future__ import annotations

import datetime
import json
import re
from typing import Optional

from . import __version__
from .errors import CommbenchError
from .results import SCHEMA_VERSION
from .spec import COLLECTIVES

# nccl-tests binary name -> (op, busbw collective)
NCCL_TESTS_OPS = {"all_reduce": "allreduce", "all_gather": "allgather", "reduce_scatter": "reduce_scatter",
                  "alltoall": "alltoall", "broadcast": "broadcast", "reduce": "reduce", "sendrecv": "sendrecv"}
NCCL_TYPES = {"float": "float32", "double": "float64", "half": "float16", "bfloat16": "bfloat16",
              "int32": "int32", "int": "int32", "int64": "int64", "int8": "int8", "uint8": "uint8"}


def _record(op, impl, dtype, redop, ranks, size, count, time_us, wrong, **extra) -> dict:
    algbw, busbw = COLLECTIVES[op].bandwidths(size, time_us * 1e-6, ranks)
    t = {k: time_us for k in ("median", "mean", "min", "max", "p95", "p99")}
    t.update(stdev=0.0, cv=0.0)
    return {"op": op, "impl": impl, "dtype": dtype, "redop": redop, "ranks": ranks, "size_bytes": size,
            "count": count, "iterations": 1, "time_us": t, "algbw_gbps": algbw, "busbw_gbps": busbw,
            "wrong": int(wrong), "samples_us": [time_us], **extra}


def _document(tool: str, source: str, op: str, ranks: int, records: list[dict], hosts: list[str],
              extra_machine: Optional[dict] = None) -> dict:
    if not records:
        raise CommbenchError(f"{source}: no result rows found in this {tool} output")
    impls = list(dict.fromkeys(r["impl"] for r in records))
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "commbench", "version": __version__, "git_commit": None},
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "argv": ["commbench", "import", tool, source],
        "config": {"op": op if op in ("allreduce", "p2p") else "p2p" if op in ("pingpong", "bandwidth") else "allreduce",
                   "impls": impls, "sizes": sorted({r["size_bytes"] for r in records}),
                   "dtype": records[0]["dtype"], "redop": records[0]["redop"], "in_place": False,
                   "policy": {"imported_from": tool}},
        "machine": {"hosts": hosts or ["unknown"], "ranks": ranks, "launcher": "mpi", "cpu_model": "unknown",
                    "cores": 1, "memory_bytes": 0, "os": "unknown", "python": "unknown", "torch": "unknown",
                    "mpi": None, **(extra_machine or {})},
        "env": {},
        "imported": {"tool": tool, "source": source},
        "status": "complete",
        "error": None,
        "results": records,
    }


def import_nccl_tests(text: str, source: str, op: Optional[str] = None) -> dict:
    """nccl-tests output: the JSON of -J when the text is JSON, else the stdout table."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            doc = json.loads(stripped)
        except json.JSONDecodeError as e:
            raise CommbenchError(f"{source}: truncated or broken nccl-tests JSON ({e})") from None
        return _nccl_tests_json(doc, source, op)
    return _nccl_tests_table(text, source, op)


def _number(text: str, source: str, line: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise CommbenchError(f"{source}: cannot read {text!r} as a number in line: {line.strip()}") from None


def _op_from(name: str, source: str, given: Optional[str]) -> str:
    if given:
        return given
    for key, op in NCCL_TESTS_OPS.items():
        if key in name:
            return op
    raise CommbenchError(f"{source}: cannot tell which collective this is; give --op (e.g. --op allreduce)")


def _nccl_tests_table(text: str, source: str, op: Optional[str]) -> dict:
    ranks, hosts, gpus, binary = 0, [], [], ""
    records = []
    for line in text.splitlines():
        m = re.match(r"#\s+Rank\s+\d+\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s+(.*)$", line)
        if m:
            ranks += 1
            hosts.append(m.group(1))
            gpus.append(m.group(2).strip())
            continue
        if not binary:
            m = re.search(r"(\w+)_perf", line)
            binary = m.group(1) if m else ""
        cells = line.split()
        if line.startswith("#") or len(cells) < 13 or not cells[0].isdigit():
            continue
        size, count, dtype, redop = int(cells[0]), int(_number(cells[1], source, line)), cells[2], cells[3]
        op_name = _op_from(binary, source, op)
        for impl, (t, wrong) in (("nccl", (cells[5], cells[8])), ("nccl-in-place", (cells[9], cells[12]))):
            records.append((op_name, impl, NCCL_TYPES.get(dtype, dtype), redop, size, count, _number(t, source, line),
                            0 if wrong == "N/A" else int(_number(wrong, source, line))))
    ranks = max(ranks, 1)
    recs = [_record(o, i, d, r, ranks, s, c, t, w) for o, i, d, r, s, c, t, w in records]
    return _document("nccl-tests", source, recs[0]["op"] if recs else "allreduce", ranks, recs,
                     list(dict.fromkeys(hosts)), {"gpus": sorted(set(gpus))} if gpus else None)


def _nccl_tests_json(doc: dict, source: str, op: Optional[str]) -> dict:
    try:
        devices = doc.get("config", {}).get("devices", [])
        args = doc.get("args") or [""]
        ranks = max(len(devices), 1)
        recs = []
        for r in doc["results"]:
            op_name = _op_from(f"{args[0]} {r.get('experiment_name', '')}", source, op)
            for impl, block in (("nccl", r.get("out_of_place")), ("nccl-in-place", r.get("in_place"))):
                if not block:
                    continue
                t = float(block.get("time", block.get("cpu_time")))
                wrong = block.get("nwrong")
                recs.append(_record(op_name, impl, NCCL_TYPES.get(r["type"], r["type"]), r["redop"], ranks,
                                    int(r["size"]), int(r["count"]), t, 0 if wrong in (None, "nan") else int(float(wrong))))
    except (KeyError, TypeError, ValueError) as e:
        raise CommbenchError(f"{source}: not the JSON of nccl-tests -J ({type(e).__name__}: {e})") from None
    hosts = list(dict.fromkeys(d.get("hostname", "unknown") for d in devices))
    gpus = sorted({d.get("device_info", "") for d in devices} - {""})
    return _document("nccl-tests", source, recs[0]["op"] if recs else "allreduce", ranks, recs, hosts,
                     {"gpus": gpus} if gpus else None)


OSU_TESTS = {"latency": "pingpong", "bw": "bandwidth", "allreduce": "allreduce"}


def _osu_test(text: str) -> Optional[str]:
    """From the title line ('# OSU MPI Allreduce Latency Test v7.4') when there is one, else from
    the column header (osu_latency prints its title on stderr)."""
    lines = text.splitlines()
    title = next((l for l in lines if l.startswith("# OSU MPI")), "")
    if "Bi-Directional" in title:
        raise CommbenchError("osu_bibw reports both directions together; import osu_bw (one direction) instead")
    if "Allreduce" in title:
        return "allreduce"
    if "Bandwidth Test" in title:
        return "bandwidth"
    if title.endswith(("Latency Test", "Latency Test v7.4")) or "MPI Latency Test" in title:
        return "pingpong"
    header = next((l for l in lines if l.startswith("# Size")), "")
    if "Bandwidth" in header:
        return "bandwidth"
    if "Avg Latency" in header and "Min Latency" not in header:
        return "pingpong"
    return None


def import_osu(text: str, source: str, test: Optional[str] = None, ranks: Optional[int] = None) -> dict:
    """osu_latency (one-way latency), osu_bw (MB/s, 1e6 B/s, per message of a window) and
    osu_allreduce (average latency per size). `test` (latency, bw, allreduce) overrides detection."""
    test = OSU_TESTS[test] if test else _osu_test(text)
    if test is None:
        raise CommbenchError(f"{source}: cannot tell which OSU test this is; give --test latency, bw or allreduce")
    nranks = ranks or 2
    if test != "allreduce" and nranks != 2:
        raise CommbenchError("osu_latency and osu_bw run between 2 ranks: drop --ranks")
    recs = []
    for line in text.splitlines():
        cells = line.split()
        if line.startswith("#") or len(cells) < 2 or not cells[0].isdigit():
            continue
        size, value = int(cells[0]), _number(cells[1], source, line)
        if test == "bandwidth":
            time_us = size / (value * 1e6) * 1e6 if value > 0 else 0.0
            recs.append(_record("bandwidth", "osu", "uint8", "none", nranks, size, size, time_us, 0, pair=[0, 1]))
        elif test == "pingpong":
            recs.append(_record("pingpong", "osu", "uint8", "none", nranks, size, size, value, 0, pair=[0, 1]))
        else:
            rec = _record("allreduce", "osu", "int8", "sum", nranks, size, size, value, 0)
            if len(cells) >= 5:
                rec["time_us"].update(min=_number(cells[2], source, line), max=_number(cells[3], source, line))
                rec["iterations"] = int(_number(cells[4], source, line))
            recs.append(rec)
    return _document("osu", source, test, nranks, recs, [])
