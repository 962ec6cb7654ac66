"""Result files: a versioned JSON document per run, validated against the shipped JSON Schema.

The file is created exclusively when a run starts and rewritten atomically after every measured
row, so a run that fails midway leaves every row it measured, and no existing file is overwritten.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
from functools import lru_cache
from importlib import resources
from typing import Optional

import pandas as pd

from .errors import CommbenchError

SCHEMA_VERSION = 1


@lru_cache(maxsize=1)
def schema() -> dict:
    return json.loads(resources.files("commbench").joinpath("schema/result.schema.json").read_text())


def validate(doc: dict, source: str = "result") -> None:
    """Raises CommbenchError naming the first bad field (as a JSON path) of an invalid document."""
    import jsonschema
    validator = jsonschema.Draft202012Validator(schema())
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        where = "/".join(str(p) for p in err.absolute_path) or "(top level)"
        raise CommbenchError(f"{source}: invalid field '{where}': {err.message}")


def load_document(path: str) -> dict:
    """A result file as a validated dict."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise CommbenchError(f"cannot read result file {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise CommbenchError(f"{path} is not JSON: {e}") from None
    validate(doc, path)
    return doc


def write_new(path: str, doc, exists_message: str) -> None:
    """Writes JSON (or text, for a str) to a path that must not exist yet."""
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    try:
        with open(path, "x") as f:
            f.write(doc if isinstance(doc, str) else json.dumps(doc, indent=1) + "\n")
    except FileExistsError:
        raise CommbenchError(exists_message) from None
    except OSError as e:
        raise CommbenchError(f"cannot write {path}: {e.strerror}") from None


def load(path: str) -> pd.DataFrame:
    """Validates a result file and returns one DataFrame row per (impl, size) record; the time
    statistics become columns time_us_median, time_us_p99, ... and the run's metadata is in
    DataFrame.attrs['meta']."""
    doc = load_document(path)
    rows = []
    for rec in doc["results"]:
        row = {k: v for k, v in rec.items() if k not in ("time_us", "samples_us")}
        row.update({f"time_us_{k}": v for k, v in rec["time_us"].items()})
        row["samples_us"] = rec["samples_us"]
        rows.append(row)
    df = pd.DataFrame(rows)
    df.attrs["meta"] = {k: v for k, v in doc.items() if k != "results"}
    return df


def default_path(op: str, now: Optional[datetime.datetime] = None) -> str:
    now = now or datetime.datetime.now(datetime.timezone.utc)
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    return os.path.join("commbench-results", f"{stamp}_{socket.gethostname()}_{op}.json")


class ResultFile:
    """The result file of one run, owned by rank 0."""

    def __init__(self, path: str, header: dict):
        self.path = path
        self.doc = {"schema_version": SCHEMA_VERSION, **header, "status": "running", "error": None,
                    "results": []}
        # Exclusive creation: an existing result is never replaced.
        write_new(path, self.doc, f"result file {path} already exists; choose another --output")

    def add(self, record: dict) -> None:
        self.doc["results"].append(record)
        self._write()

    def finish(self, error: Optional[str] = None) -> None:
        self.doc["status"] = "failed" if error else "complete"
        self.doc["error"] = error
        self._write()

    def _write(self) -> None:
        tmp = f"{self.path}.partial"
        with open(tmp, "w") as f:
            json.dump(self.doc, f, indent=1)
            f.write("\n")
        os.replace(tmp, self.path)
