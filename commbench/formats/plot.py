"""Plots a person can read in a second: bus bandwidth against size (log2 axis) and latency against
size (log-log), with fitted lines, the fabric's expected line and baselines overlaid."""

from __future__ import annotations

from typing import BinaryIO, Optional, Union

import numpy as np

from ..analysis.fabrics import Expectation
from ..analysis.fit import fit_records
from ..collectives import cost_model
from ..results.series import by_series, label, series_head, series_key
from ..sizes import format_size


def plot(runs: list[tuple[str, dict]], path: Union[str, BinaryIO], baselines: Optional[list[tuple[str, dict]]] = None,
         expected: Optional[Expectation] = None, image_format: Optional[str] = None) -> None:
    """Draws the runs (and baselines, dashed) into path: a file name, whose extension gives the image
    format, or a binary stream, with image_format."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    fig, (ax_bw, ax_t) = plt.subplots(1, 2, figsize=(14, 5.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    drawn = 0
    for group, style in ((runs, "-"), (baselines or [], "--")):
        for name, doc in group:
            fits = {series_key(f): f for f in fit_records(doc["results"])}
            tag = "" if len(runs) == 1 and not baselines else f"{name}: "
            if style == "--":
                tag = f"baseline {name}: "
            for key, rows in by_series(doc["results"]).items():
                n = np.array([max(r["size_bytes"], 1) for r in rows], dtype=float)
                bw = [r["busbw_gbps"] if r["busbw_gbps"] is not None else r["algbw_gbps"] for r in rows]
                t = [r["time_us"]["median"] for r in rows]
                c = colors[drawn % len(colors)]
                drawn += 1
                legend = tag + label(key)
                ax_bw.plot(n, bw, style, marker="o" if style == "-" else None, ms=3, color=c, label=legend)
                ax_t.plot(n, t, style, marker="o" if style == "-" else None, ms=3, color=c, label=legend)
                f = fits.get(key)
                h = series_head(key)
                model = cost_model(h["op"], h["impl"], h["ranks"])
                if style == "-" and f and "skipped" not in f and model:
                    for s in f["segments"]:
                        xs = np.geomspace(max(s["size_min"], 1), max(s["size_max"], 1), 50)
                        a = s["alpha_us"] * model.alpha_messages
                        b = (model.bytes_factor / (s["bandwidth_gbps"] * 1e9) * 1e6) if s["bandwidth_gbps"] else 0.0
                        ax_t.plot(xs, a + b * xs, ":", color=c, lw=1)
    if expected is not None:
        ax_bw.axhline(expected.bandwidth_gbps, color="k", lw=1, ls="-.",
                      label=f"expected {expected.name}: {expected.bandwidth_gbps:.3g} GB/s")
    ax_bw.set_xscale("log", base=2)
    ax_bw.set_xlabel("message size (bytes)")
    ax_bw.set_ylabel("bus bandwidth (GB/s, 1e9 B/s)")
    ax_bw.set_title("bandwidth vs size")
    ax_t.set_xscale("log", base=2)
    ax_t.set_yscale("log")
    ax_t.set_xlabel("message size (bytes)")
    ax_t.set_ylabel("time per operation (us, median)")
    ax_t.set_title("latency vs size (dotted: fit)")
    human = FuncFormatter(lambda x, _: format_size(int(x)) if x >= 1 else "")
    for ax in (ax_bw, ax_t):
        ax.xaxis.set_major_formatter(human)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110, format=image_format)
    plt.close(fig)
