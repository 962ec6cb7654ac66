"""Baselines: a result file kept for later comparison, with its metadata, the command that made it,
and (optionally) its raw samples. Never overwritten."""

from __future__ import annotations

import datetime
import json
import os

from .errors import CommbenchError
from .results import load_document, write_new

DEFAULT_DIR = os.path.join("results", "baselines")


def save(run_path: str, name: str, directory: str = DEFAULT_DIR, keep_samples: bool = False) -> str:
    if not name or os.sep in name or name.startswith("."):
        raise CommbenchError(f"bad baseline name '{name}': use a plain file name such as h100-node-a")
    doc = load_document(run_path)
    if not keep_samples:
        for r in doc["results"]:
            r["samples_us"] = []  # the summary statistics stay; fits then use the medians
    doc["baseline"] = {"name": name, "saved": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                       "source": os.path.basename(run_path), "command": " ".join(doc.get("argv", [])),
                       "samples_kept": keep_samples}
    path = os.path.join(directory, f"{name}.json")
    write_new(path, doc, f"baseline {name} already exists in {directory}; choose another --name or delete it first")
    return path
