"""csv: one row per record, the time statistics as columns time_us_median, time_us_p99, ...; no
raw samples."""

from __future__ import annotations

import json

from .options import records

SUMMARY = "one row per (impl, size), time statistics as time_us_* columns, no raw samples"
BINARY = False
SAMPLES = False


def render(doc: dict, options) -> str:
    import pandas as pd  # here: pandas takes a while to import and only this format needs it
    table = pd.json_normalize(records(doc, False), sep="_")
    # What stays a list after flattening (a pair, a spread, per_rank's rows) is a cell of JSON, which
    # any reader parses, not Python's repr of it.
    for column in table.columns:
        if table[column].map(lambda v: isinstance(v, (list, dict))).any():
            table[column] = table[column].map(lambda v: json.dumps(v) if isinstance(v, (list, dict)) else v)
    return table.to_csv(index=False)


def render_numerics(doc: dict, options) -> str:
    import pandas as pd
    return pd.DataFrame(doc["numerics"]["rows"]).to_csv(index=False)
