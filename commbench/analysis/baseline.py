"""Baselines: a result file kept for later comparison, with its metadata, the command that made it,
and (optionally) its raw samples. Never overwritten."""

from __future__ import annotations

import datetime
import os
import shlex

from ..errors import CommbenchError
from ..node.machine import recorded_env, typed_command
from ..results.atomic import check_new_file
from ..results.document import load_document, write_new
from .fit import require_usable

DEFAULT_DIR = os.path.join("results", "baselines")


def clean(doc: dict) -> None:
    """Keeps of a result file's environment only what any result file records now, and its command
    as typed: baselines go into shared repositories, and a run file may predate those rules."""
    doc["env"] = recorded_env(doc["env"])
    doc["argv"] = typed_command(doc["argv"])


def save(run_path: str, name: str, directory: str = DEFAULT_DIR, keep_samples: bool = False) -> str:
    if not name or os.sep in name or name.startswith("."):
        raise CommbenchError(f"bad baseline name '{name}': use a plain file name such as h100-node-a")
    if name.endswith(".json"):
        raise CommbenchError(f"bad baseline name '{name}': the name without .json (the file is NAME.json): "
                             f"--name {name[:-len('.json')]}")
    path = os.path.join(directory, f"{name}.json")
    exists = f"baseline {name} already exists in {directory}; choose another --name or delete it first"
    check_new_file(path, exists)
    doc = load_document(run_path)
    if doc.get("status", "complete") != "complete":
        raise CommbenchError(f"{run_path}: the run ended {doc['status']}, not complete: a baseline is a whole run "
                             f"(measure it again)")
    write(doc, run_path, path, name, exists, keep_samples)
    return path


def write(doc: dict, run_path: str, path: str, name: str, exists: str, keep_samples: bool = False, **facts) -> None:
    """Keeps the run `doc` (read from run_path) at `path` as baseline `name`, with `facts` in its
    baseline section; never over an existing file."""
    require_usable(doc, run_path)
    wrong = [r for r in doc["results"] if r.get("wrong")]
    if wrong:
        raise CommbenchError(f"{run_path}: {len(wrong)} of its {len(doc['results'])} records have wrong elements: a "
                             f"baseline is a correct run")
    clean(doc)
    if not keep_samples:
        for r in doc["results"]:
            r["samples_us"] = []  # the summary statistics stay; fits then use the medians
    doc["baseline"] = {"name": name, "saved": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                       "source": os.path.basename(run_path), "command": shlex.join(doc["argv"]),
                       "samples_kept": keep_samples, **facts}
    write_new(path, doc, exists)
