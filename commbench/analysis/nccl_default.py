"""NCCL's own choice against the variants that force it (results/nccl_knobs.py): per size, the
best forced combination beside the default, and how much slower the default is where it loses by more
than SLOWER. What NCCL chose comes from its own report (the records' nccl_choice)."""

from __future__ import annotations

from ..results.nccl_knobs import fields, forced_text
from ..results.series import SERIES_FIELDS, by_series, label, series_head
from ..sizes import format_size

SLOWER = 0.10  # the default is marked where it takes more than this much longer than the best forced

FORCED = [SERIES_FIELDS.index(f) for f in fields()]


def _choice(rec: dict) -> str:
    c = rec.get("nccl_choice")
    return f" ({c['algo']}/{c['proto']})" if c else ""


def summary_lines(doc: dict) -> list[str]:
    """For each series of NCCL's call measured with forced variants beside it: a heading line, then one
    line per size with the default's time and the best variant's."""
    groups: dict[tuple, dict[str, dict[int, dict]]] = {}
    for key, recs in by_series(doc["results"]).items():
        if series_head(key)["impl"] != "nccl":
            continue
        plain = tuple(None if i in FORCED else v for i, v in enumerate(key))
        groups.setdefault(plain, {})[forced_text(series_head(key))] = {r["size_bytes"]: r for r in recs}
    lines = []
    for plain, by_variant in groups.items():
        default = by_variant.pop("", None)
        if default is None or not by_variant:
            continue
        lines.append(f"NCCL's default against the best forced choice: {label(plain)}")
        for size, rec in default.items():
            measured = [(f[size]["time_us"]["median"], name, f[size]) for name, f in by_variant.items() if size in f]
            if not measured:
                continue
            best_t, best_name, best = min(measured, key=lambda m: m[0])
            t = rec["time_us"]["median"]
            line = (f"  {format_size(size)}: default{_choice(rec)} {t:.2f} us, best {best_name}{_choice(best)} "
                    f"{best_t:.2f} us")
            if best_t > 0 and t > best_t * (1 + SLOWER):
                line += f": default slower by {100 * (t / best_t - 1):.0f} %"
            lines.append(line)
    return lines
