"""png: the plot of a run (plot.py): bus bandwidth and latency against size, with the fits and the
expected line of options.expected."""

from __future__ import annotations

import io

SUMMARY = "bus bandwidth and latency against size, with fits and the expected line (needs -o)"
BINARY = True
SAMPLES = False


def render(doc: dict, options) -> bytes:
    from .plot import plot  # matplotlib is imported only when a plot is drawn
    out = io.BytesIO()
    plot([(options.source, doc)], out, expected=options.expected, image_format="png")
    return out.getvalue()


def render_numerics(doc: dict, options) -> bytes:
    from .numerics import plot
    out = io.BytesIO()
    plot(doc, out, image_format="png")
    return out.getvalue()
