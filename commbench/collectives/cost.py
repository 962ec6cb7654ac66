"""Cost models: how a series' fitted line t(n) = a + b n reads as a per-message latency (alpha) and a
link bandwidth through the algorithm that ran (DESIGN: ring 2(p-1) steps, trees, Hockney for
point-to-point). Each collective module gives its algorithms' models; the fit (analysis/fit.py)
only translates through them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CostModel:
    name: str
    alpha_messages: float  # latency terms in t: alpha = a / alpha_messages
    bytes_factor: float  # bandwidth terms in t: n * bytes_factor / BW, so BW = bytes_factor / b
    effective: bool  # a library whose algorithm is unknown: the figures are effective values


# Point-to-point and copies: one message between two endpoints.
HOCKNEY = CostModel("Hockney: t = alpha + n/BW", 1.0, 1.0, False)
