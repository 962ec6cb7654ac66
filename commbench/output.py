"""The stdout table, in nccl-tests' layout: one block per impl, one row per size."""

from __future__ import annotations

from typing import Optional

_COLS = ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "min", "p99", "CV")
_UNITS = ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(%)")
_WIDTHS = (12, 12, 9, 6, 5, 10, 8, 8, 7, 10, 10, 6)


def _line(cells) -> str:
    return "".join(str(c).rjust(w) for c, w in zip(cells, _WIDTHS))


def header(meta: dict) -> list[str]:
    m = meta["machine"]
    hosts = m["hosts"]
    cfg = meta["config"]
    lines = [
        f"# commbench {meta['tool']['version']}" + (f" ({meta['tool']['git_commit'][:12]})" if meta["tool"]["git_commit"] else ""),
        f"# {cfg['op']}: {m['ranks']} rank(s) on {len(hosts)} host(s): {', '.join(hosts)} (launcher: {m['launcher']})",
        f"# MPI: {m['mpi'] or 'not available'}",
        f"# torch {m['torch']}, Python {m['python']}, {m['cpu_model']}, {m['cores']} cores",
        f"# impls: {', '.join(cfg['impls'])}; dtype {cfg['dtype']}; redop {cfg['redop']}; "
        + ("in-place" if cfg["in_place"] else "out-of-place"),
        "# time = median (p50) over iterations of the slowest rank's time; GB/s = 1e9 B/s",
    ]
    return lines


def block_header(impl: str, description: str) -> list[str]:
    return ["#", f"# impl {impl}: {description}", "#" + _line(_COLS)[1:], "#" + _line(_UNITS)[1:]]


def _num(x: Optional[float], digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def row(rec: dict) -> str:
    t = rec["time_us"]
    return _line((
        rec["size_bytes"], rec["count"], rec["dtype"], rec.get("redop", "none"), "-1",
        _num(t["median"]), _num(rec["algbw_gbps"]), _num(rec["busbw_gbps"]), rec["wrong"],
        _num(t["min"]), _num(t["p99"]), f"{t['cv'] * 100:.1f}",
    ))
