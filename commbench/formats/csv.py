"""csv: one row per record, the time statistics as columns time_us_median, time_us_p99, ...; no
raw samples."""

from __future__ import annotations

from .options import records

SUMMARY = "one row per (impl, size), time statistics as time_us_* columns, no raw samples"
BINARY = False
SAMPLES = False


def render(doc: dict, options) -> str:
    import pandas as pd  # here: pandas takes a while to import and only this format needs it
    return pd.json_normalize(records(doc, False), sep="_").to_csv(index=False)
