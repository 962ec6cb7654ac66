"""Result files written before an impl had one meaning (collectives/impls.py), read as today's: the
one upgrade, applied where documents are loaded (document.load_document), so that every command
that reads a result file sees records of one form. Those files named

- our algorithms bare (ring), over the transport of the run's device: now ring@mpi or ring@nccl;
- the in-place half of a nccl-tests import nccl-in-place: now impl nccl with in_place true (and the
  out-of-place half in_place false);
- links' rows under load <impl>-loaded: now impl <impl> with schedule loaded (the others clean);
- a copy's mode (pinned, pageable, pinned2, ce, sm) as its impl: now impl cuda with that mode;
- their placement as config.in_place (true or false): now config.place (in or out).

A document already in today's form comes back equal to itself."""

from __future__ import annotations

from ..collectives import COPIES, get, names
from ..collectives.impls import COPY_IMPL, resolve

IN_PLACE = "nccl-in-place"
LOADED = "-loaded"
# What copy runs listed as their impls: the modes, and 'staged' for the staged copy.
COPY_NAMES = ("pinned", "pageable", "pinned2", "staged", "ce", "sm")
LINKS_OPS = ("pingpong", "bandwidth")


def _name(impl: str, coll, device: str) -> str:
    """Today's name of an impl as a header's config.impls or a numerics row held it."""
    if impl in COPY_NAMES:
        return COPY_IMPL
    if impl == IN_PLACE:
        return "nccl"
    return resolve(impl, coll, device) if coll is not None else impl


def _record(r: dict, device: str, nccl_tests: bool, links: bool, names: dict) -> dict:
    """r in today's form: r itself where nothing changes (a fleet's file holds 100,000 records);
    `names` keeps today's name of each (impl, op) met so far."""
    impl, op = r["impl"], r["op"]
    if op in COPIES and impl != COPY_IMPL:
        return {**r, "impl": COPY_IMPL, "mode": impl}
    if impl == IN_PLACE:
        return {**r, "impl": "nccl", "in_place": True}
    if nccl_tests and "in_place" not in r:
        return {**r, "in_place": False}
    if links and op in LINKS_OPS and "schedule" not in r:
        loaded = impl.endswith(LOADED)
        return {**r, "impl": impl[:-len(LOADED)] if loaded else impl, "schedule": "loaded" if loaded else "clean"}
    if (impl, op) not in names:
        names[impl, op] = _name(impl, _collective(op), device)
    return r if names[impl, op] == impl else {**r, "impl": names[impl, op]}


def _collective(op: str):
    return get(op) if op in names() else None


def upgrade(doc: dict) -> dict:
    """`doc` (a validated result document) with its records, header config and numerics rows in
    today's form; bare algorithms are read over the transport of config.device (cpu by default)."""
    cfg = doc["config"]
    device, coll = cfg.get("device", "cpu"), _collective(cfg["op"])
    nccl_tests = (doc.get("imported") or {}).get("tool") == "nccl-tests"
    config = {k: v for k, v in cfg.items() if k != "in_place"}
    config["place"] = cfg.get("place", "in" if cfg.get("in_place") else "out")
    names: dict = {}
    out = {**doc, "config": {**config, "impls": list(dict.fromkeys(_name(i, coll, device) for i in cfg["impls"]))},
           "results": [_record(r, device, nccl_tests, "links" in doc, names) for r in doc["results"]]}
    if "numerics" in doc:
        rows = [{**row, "impl": _name(row["impl"], coll, device)} for row in doc["numerics"]["rows"]]
        out["numerics"] = {**doc["numerics"], "rows": rows}
    return out
