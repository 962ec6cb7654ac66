"""Plots a person can read in a second: bus bandwidth against size (log2 axis) and latency against
size (log-log), with fitted lines, the fabric's expected line and baselines overlaid."""

from __future__ import annotations

import warnings
from typing import BinaryIO, Optional, Union

import numpy as np

from ..analysis.fabrics import Expectation
from ..analysis.fit import fit_records
from ..collectives import cost_model
from ..results.series import by_series, label, series_head, series_key
from ..sizes import format_size
from .options import printable

# Series named in a legend; a fleet's file holds thousands, and a legend of thousands took minutes
# to lay out and says nothing: the rest are counted in one more entry.
MAX_LEGEND = 12
# The longest legend entry: a series' label is the file's words (an impl's name), and one of 100,000
# characters took matplotlib 95 s to lay out.
MAX_LABEL = 80


def _short(text: str) -> str:
    return text if len(text) <= MAX_LABEL else text[:MAX_LABEL - 3] + "..."


def plot(runs: list[tuple[str, dict]], path: Union[str, BinaryIO], baselines: Optional[list[tuple[str, dict]]] = None,
         expected: Optional[Expectation] = None, image_format: Optional[str] = None) -> None:
    """Draws the runs (and baselines, dashed) into path: a file name, whose extension gives the image
    format, or a binary stream, with image_format."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter

    fig, (ax_bw, ax_t) = plt.subplots(1, 2, figsize=(14, 5.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    palette = matplotlib.colors.to_rgba_array(colors)
    # Every line of an axis goes into one collection, every marker into one scatter: thousands of
    # separate artists took minutes to draw.
    lines = {ax: {"-": [], "--": [], ":": []} for ax in (ax_bw, ax_t)}
    line_colors = {ax: {"-": [], "--": [], ":": []} for ax in (ax_bw, ax_t)}
    dots = {ax: ([], [], []) for ax in (ax_bw, ax_t)}
    handles = []
    drawn = 0
    for group, style in ((runs, "-"), (baselines or [], "--")):
        for raw_name, doc in group:
            name = printable(raw_name)
            fits = {series_key(f): f for f in fit_records(doc["results"])}
            tag = "" if len(runs) == 1 and not baselines else f"{name}: "
            if style == "--":
                tag = f"baseline {name}: "
            for key, rows in by_series(doc["results"]).items():
                n = np.array([max(r["size_bytes"], 1) for r in rows], dtype=float)
                bw = np.array([r["busbw_gbps"] if r["busbw_gbps"] is not None else r["algbw_gbps"] for r in rows],
                              dtype=float)  # None (nothing to show) as NaN: a gap in the line
                t = np.array([r["time_us"]["median"] for r in rows], dtype=float)
                c = colors[drawn % len(colors)]
                which = drawn % len(colors)
                drawn += 1
                if len(handles) < MAX_LEGEND:
                    handles.append(Line2D([], [], ls=style, marker="o" if style == "-" else None, ms=3, color=c,
                                          label=_short(tag + label(key))))
                for ax, y in ((ax_bw, bw), (ax_t, t)):
                    lines[ax][style].append(np.column_stack([n, y]))
                    line_colors[ax][style].append(c)
                    if style == "-":  # arrays, joined once: a list of 100,000 floats took seconds to convert
                        dots[ax][0].append(n)
                        dots[ax][1].append(y)
                        dots[ax][2].append(np.full(len(n), which))
                f = fits.get(key)
                h = series_head(key)
                model = cost_model(h["op"], h["impl"], h["ranks"])
                if style == "-" and f and "skipped" not in f and model:
                    for s in f["segments"]:
                        xs = np.geomspace(max(s["size_min"], 1), max(s["size_max"], 1), 50)
                        a = s["alpha_us"] * model.alpha_messages
                        b = (model.bytes_factor / (s["bandwidth_gbps"] * 1e9) * 1e6) if s["bandwidth_gbps"] else 0.0
                        lines[ax_t][":"].append(np.column_stack([xs, a + b * xs]))
                        line_colors[ax_t][":"].append(c)
    if drawn > len(handles):
        handles.append(Line2D([], [], ls="none", label=f"... and {drawn - len(handles)} more series"))
    if expected is not None:
        ax_bw.axhline(expected.bandwidth_gbps, color="k", lw=1, ls="-.")
        handles.append(Line2D([], [], color="k", lw=1, ls="-.",
                              label=f"expected {expected.name}: {expected.bandwidth_gbps:.3g} GB/s"))
    ax_bw.set_xscale("log", base=2)
    ax_t.set_xscale("log", base=2)
    ax_t.set_yscale("log")
    with warnings.catch_warnings():
        # Every figure alike (one size, or a file's equal times): matplotlib widens the axis itself, and
        # its warning that it does so is no news of the run.
        warnings.filterwarnings("ignore", message="Attempting to set identical", category=UserWarning)
        for ax in (ax_bw, ax_t):
            for style, segments in lines[ax].items():
                if segments:
                    ax.add_collection(LineCollection(segments, colors=line_colors[ax][style], linestyles=style,
                                                     linewidths=1 if style == ":" else 1.5))
            if dots[ax][0]:
                ax.scatter(np.concatenate(dots[ax][0]), np.concatenate(dots[ax][1]), s=9,
                           c=palette[np.concatenate(dots[ax][2])], zorder=3)
            ax.autoscale_view()
    ax_bw.set_xlabel("message size (bytes)")
    ax_bw.set_ylabel("bus bandwidth (GB/s, 1e9 B/s)")
    ax_bw.set_title("bandwidth vs size")
    ax_t.set_xlabel("message size (bytes)")
    ax_t.set_ylabel("time per operation (us, median)")
    ax_t.set_title("latency vs size (dotted: fit)")
    human = FuncFormatter(lambda x, _: format_size(int(x)) if x >= 1 else "")
    for ax in (ax_bw, ax_t):
        ax.xaxis.set_major_formatter(human)
        ax.grid(True, which="both", alpha=0.3)
        # Sizes grow to the right and so do time and bandwidth: the upper left is free ("best"
        # searched every point of every series for a place).
        ax.legend(handles=[h for h in handles if ax is ax_bw or not h.get_label().startswith("expected ")],
                  fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110, format=image_format)
    plt.close(fig)
