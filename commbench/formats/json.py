"""json: the records of a run, one JSON object each, as the result file holds them (without the
raw per-iteration samples unless options.samples)."""

from __future__ import annotations

import json

from .options import records

SUMMARY = "the records as a JSON list (raw samples only with --samples)"
BINARY = False
SAMPLES = True


def render(doc: dict, options) -> str:
    return json.dumps(records(doc, options.samples), indent=1) + "\n"


def render_numerics(doc: dict, options) -> str:
    return json.dumps(doc["numerics"]["rows"], indent=1) + "\n"
