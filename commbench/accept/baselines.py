"""Per-SKU baselines: an accepted run of a known-good node promoted into one baseline file per step,
in a folder per SKU (BASELINES/<sku>/<plan>-<step>.json), and for each step of a later run the
baseline of the same SKU, series (op, impl, rank count, dtype, ...), host count and timing mode.
Versions (driver, NCCL) are facts a baseline records, not keys: a node whose driver was updated is
still judged against its kind, and compare names the difference."""

from __future__ import annotations

import os
import re
from typing import Optional

from ..analysis.baseline import write
from ..analysis.sku import differences, same_kind, sku_of
from ..errors import CommbenchError
from ..results.atomic import check_new_file
from ..results.document import load_document, timing_of
from ..results.series import series_key
from ..run.config import RunConfig
from .judge import ORDER, PASS, WARN

SUMMARY = "summary.json"


def sku_folder(sku: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", sku).strip("-")


def _hosts(doc: dict) -> int:
    return len(doc.get("machine", {}).get("hosts") or [None])


def read_summary(run_dir: str) -> dict:
    from ..results.document import read_json
    path = os.path.join(run_dir, SUMMARY)
    if not os.path.lexists(path):
        raise CommbenchError(f"{run_dir} is not the folder of an accept run (it has no {SUMMARY})")
    summary = read_json(path, "accept summary")  # bounded, a FIFO or a device included
    if not isinstance(summary, dict) or not isinstance(summary.get("steps"), list):
        raise CommbenchError(f"{path} is not an accept summary")
    return summary


def promote(run_dir: str, directory: str, force: bool = False, partial: bool = False) -> list[str]:
    """The baselines written from the accept run in run_dir: one per step that left a result file and
    passed (WARN included). A failed run is refused unless `force`; an interrupted one (stopped by a
    signal, a job's time limit) with `partial` gives the steps that passed before it stopped, each
    marked partial. An existing baseline is never replaced, and then nothing is written."""
    summary = read_summary(run_dir)
    interrupted = bool(summary.get("interrupted"))
    if partial and not interrupted:
        raise CommbenchError(f"--partial promotes what an interrupted run passed; {run_dir} ran to its end "
                             f"({summary.get('status')})")
    if summary.get("status") not in (PASS, WARN) and not force and not partial:
        more = "; it was interrupted: --partial promotes the steps that passed before" if interrupted else ""
        raise CommbenchError(f"{run_dir} did not pass acceptance ({summary.get('status')}): only a node shown good "
                             f"becomes a baseline (--force to promote it anyway{more})")
    if partial and not force and any(ORDER.get(s.get("status"), 3) > ORDER[WARN] and not s.get("interrupted")
                                     for s in summary["steps"] if s.get("counted", True)):
        raise CommbenchError(f"{run_dir}: a step failed before the run was interrupted: only a node shown good "
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
              host=summary.get("host"), quick=bool(summary.get("quick")), facts=facts_of(doc),
              **({"partial": True} if partial else {}))
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
# A rank held back (delay) is not among them: it is what a baseline must catch. A file of an older
# commbench that does not record one of them ran with its default.
METHOD = ("device", "graph", "chunk_bytes", "agg", "buffers", "window", "root")
_METHOD_DEFAULTS = {k: getattr(RunConfig, k) for k in METHOD}


def method_of(doc: dict) -> tuple:
    config = doc.get("config") or {}
    return tuple(config.get(k, _METHOD_DEFAULTS[k]) for k in METHOD)


def _section(doc: dict) -> dict:
    return doc.get("baseline") or {}


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
                    except OSError as e:  # a symbolic link in a loop, a file without read permission
                        self.skipped.append(f"{path}: {e.strerror or e}")

    def pick(self, doc: dict, quick: bool, step: Optional[str] = None,
             plan: Optional[str] = None) -> tuple[Optional[tuple[str, dict]], str]:
        """(path, baseline) of the run's kind: the same SKU (same_kind), timing mode, host count and
        way of measuring (method_of), sharing a series with the run; of those, one promoted from the
        step of the same name first (two steps of a plan may time the same series in other ways: the
        plain all-reduce and the one with a rank held back), of the same plan, with the same rank
        held back, then the most series in common, then the newest. None, and a line saying which
        or why none. A --quick run (small budgets, few iterations) is judged against a quick run's
        baselines alone, a full one against a full one's."""
        if self.directory is None:
            return None, "no --baselines given"
        best, best_rank = None, None
        for path, base in self.docs:
            if self._differs(doc, base, quick):
                continue
            shared = len(self._keys(doc) & self._keys(base))
            section = _section(base)
            rank = (step is not None and section.get("step") == step, plan is not None and section.get("plan") == plan,
                    (base.get("config") or {}).get("delay") == (doc.get("config") or {}).get("delay"), shared,
                    base.get("created", ""))
            if shared and (best_rank is None or rank > best_rank):
                best, best_rank = (path, base), rank
        if best is None:
            return None, (f"no baseline of SKU '{sku_of(doc)}' with these series ({timing_of(doc)} timing, {_hosts(doc)} "
                          f"host(s){', --quick' if quick else ''}) in {self.directory}: judged without one")
        return best, f"baseline {best[0]}"

    def unmatched(self, doc: dict, quick: bool, step: str) -> Optional[str]:
        """Where baselines promoted from a step of this name exist and none was this run's kind: how
        the first of them differs (a node of another kind, or a baseline of another method), else None."""
        reasons = []
        for path, base in self.docs:
            if _section(base).get("step") == step:
                why = self._differs(doc, base, quick) or (None if self._keys(doc) & self._keys(base) else
                                                          "it shares no series with the run")
                if why is None:
                    return None
                reasons.append(f"{path} (promoted from step '{step}') is not this run's kind: {why}")
        return reasons[0] if reasons else None

    @staticmethod
    def _keys(doc: dict) -> set:
        return {series_key(r) for r in doc["results"]}

    @staticmethod
    def _differs(doc: dict, base: dict, quick: bool) -> Optional[str]:
        """How `base` is not of `doc`'s kind, or None."""
        if not same_kind(doc, base):
            return "SKU " + "; ".join(differences(doc, base))
        if timing_of(base) != timing_of(doc):
            return f"{timing_of(base)} timing against the run's {timing_of(doc)}"
        if _hosts(base) != _hosts(doc):
            return f"{_hosts(base)} host(s) against the run's {_hosts(doc)}"
        if _section(base).get("quick", False) != quick:
            return f"{'a --quick' if _section(base).get('quick') else 'a full'} run's, the run {'--quick' if quick else 'full'}"
        if method_of(base) != method_of(doc):
            return "measured otherwise: " + ", ".join(f"{k} {b} against {r}" for k, b, r in zip(METHOD, method_of(base), method_of(doc))
                                                    if b != r)
        return None
