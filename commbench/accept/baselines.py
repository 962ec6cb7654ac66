"""Per-SKU baselines: an accepted run of a known-good node promoted into one baseline file per step,
in a folder per SKU (BASELINES/<sku>/<plan>-<step>.json), and for each step of a later run the
baseline of the same SKU, series (op, impl, rank count, dtype, ...), host count and timing mode.
Versions (driver, NCCL) are facts a baseline records, not keys: a node whose driver was updated is
still judged against its kind, and compare names the difference."""

from __future__ import annotations

import json
import os
import re
from typing import Optional

from ..analysis.baseline import write
from ..analysis.fleet import sku_of
from ..errors import CommbenchError
from ..results.atomic import check_new_file
from ..results.document import load_document, timing_of
from ..results.series import series_key
from .judge import ORDER, PASS, WARN

SUMMARY = "summary.json"


def sku_folder(sku: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", sku).strip("-")


def _hosts(doc: dict) -> int:
    return len(doc.get("machine", {}).get("hosts") or [None])


def read_summary(run_dir: str) -> dict:
    path = os.path.join(run_dir, SUMMARY)
    try:
        with open(path) as f:
            summary = json.load(f)
    except FileNotFoundError:
        raise CommbenchError(f"{run_dir} is not the folder of an accept run (it has no {SUMMARY})") from None
    except (OSError, ValueError) as e:
        raise CommbenchError(f"{path}: unreadable ({e})") from None
    if not isinstance(summary, dict) or not isinstance(summary.get("steps"), list):
        raise CommbenchError(f"{path} is not an accept summary")
    return summary


def promote(run_dir: str, directory: str, force: bool = False) -> list[str]:
    """The baselines written from the accept run in run_dir: one per step that left a result file and
    passed (WARN included). A failed run is refused unless `force`; an existing baseline is never
    replaced, and then nothing is written."""
    summary = read_summary(run_dir)
    if summary.get("status") not in (PASS, WARN) and not force:
        raise CommbenchError(f"{run_dir} did not pass acceptance ({summary.get('status')}): only a node shown good "
                             f"becomes a baseline (--force to promote it anyway)")
    todo = []
    for step in summary["steps"]:
        if not step.get("result") or ORDER.get(step.get("status"), 3) > ORDER[WARN] and not force:
            continue
        path = os.path.join(run_dir, step["result"])
        doc = load_document(path)
        sku = sku_of(doc)
        target = os.path.join(directory, sku_folder(sku), f"{summary['plan']}-{os.path.splitext(step['result'])[0]}.json")
        exists = f"baseline {target} already exists: delete it first to replace it, or promote into another --baselines"
        check_new_file(target, exists)
        todo.append((doc, path, target, exists, sku, step["step"]))
    if not todo:
        raise CommbenchError(f"{run_dir}: no step left a result file to promote")
    written = []
    for doc, path, target, exists, sku, step_name in todo:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        write(doc, path, target, f"{summary['plan']}-{step_name}", exists, sku=sku, plan=summary["plan"], step=step_name,
              host=summary.get("host"), quick=bool(summary.get("quick")), facts=facts_of(doc))
        written.append(target)
    return written


def facts_of(doc: dict) -> dict:
    """What a baseline records of its node beside the SKU, for the reader: versions and the topology
    fingerprint (a later run's differences are named, not keys)."""
    topo = doc.get("topology") or {}
    machine = doc.get("machine") or {}
    return {"gpu_driver": (topo.get("gpus") or {}).get("driver"), "nccl": (topo.get("libraries") or {}).get("nccl"),
            "mpi": machine.get("mpi"), "torch": machine.get("torch"),
            "topology_fingerprint": doc.get("topology_fingerprint")}


# What changes how a figure is measured without showing in its series: a run captured in a CUDA
# graph, another chunk size or aggregation, the tool's or the library's buffers, a window, a root.
# A rank held back (delay) is not among them: it is what a baseline must catch.
METHOD = ("device", "graph", "chunk_bytes", "agg", "buffers", "window", "root")


def method_of(doc: dict) -> tuple:
    config = doc.get("config") or {}
    return tuple(config.get(k) for k in METHOD)


class Baselines:
    """The baselines under a folder, read once."""

    def __init__(self, directory: Optional[str]):
        self.directory = directory
        self.docs: list[tuple[str, dict]] = []
        self.skipped: list[str] = []
        if directory is None:
            return
        if not os.path.isdir(directory):
            raise CommbenchError(f"--baselines {directory}: no such folder")
        for folder, dirs, files in os.walk(directory):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(".json"):
                    path = os.path.join(folder, name)
                    try:
                        self.docs.append((path, load_document(path)))
                    except CommbenchError as e:
                        self.skipped.append(str(e))

    def pick(self, doc: dict, quick: bool, step: Optional[str] = None) -> tuple[Optional[tuple[str, dict]], str]:
        """(path, baseline) of the run's kind: the same SKU, timing mode, host count and way of
        measuring (method_of), sharing a series with the run; of those, one promoted from the step of
        the same name first (two steps of a plan may time the same series in other ways: the plain
        all-reduce and the one with a rank held back), then the most series in common, then the
        newest. None, and a line saying which or why none. A --quick run (small budgets, few
        iterations) is judged against a quick run's baselines alone, a full one against a full one's."""
        if self.directory is None:
            return None, "no --baselines given"
        sku, timing, hosts, method = sku_of(doc), timing_of(doc), _hosts(doc), method_of(doc)
        keys = {series_key(r) for r in doc["results"]}
        best, best_rank = None, None
        for path, base in self.docs:
            if (sku_of(base) != sku or timing_of(base) != timing or _hosts(base) != hosts
                    or method_of(base) != method or base.get("baseline", {}).get("quick", False) != quick):
                continue
            shared = len(keys & {series_key(r) for r in base["results"]})
            rank = (step is not None and base.get("baseline", {}).get("step") == step, shared, base.get("created", ""))
            if shared and (best_rank is None or rank > best_rank):
                best, best_rank = (path, base), rank
        if best is None:
            return None, (f"no baseline of SKU '{sku}' with these series ({timing} timing, {hosts} host(s)"
                          f"{', --quick' if quick else ''}) in "
                          f"{self.directory}: judged without one")
        return best, f"baseline {best[0]}"

