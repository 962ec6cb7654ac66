"""Is this number normal? Reference envelopes (commbench/envelopes.json): for a kind of node, a range of
a collective's or a copy's figure from a size on, each with its source. A run whose node the envelope
names is placed in it, from the envelope's first size on: the peak figure there below, within, or
above the range (a collective's above: the bus factor assumes a ring, which NVLS and SHARP are not;
docs/method.md). A collective's envelope that names a node's GPUs places a run over all of them.

The node is named by its topology snapshot where the file has one (GPU model and count on rank 0's
host, InfiniBand ports), else by the GPU names a result records (imports) and its ranks per host.
Where a record says which algorithm NCCL ran (nccl_choice), only the envelope of that algorithm
places it; where none says (an import, NCCL before 2.27), every envelope of the operation does, each
line saying the algorithm is not known. Envelopes sit beside the catalog's single expected figure
(fabrics.json), which a fit's verdict still uses; they judge nothing."""

from __future__ import annotations

import json
import os
import re

from ..results.nccl_knobs import forced_text
from ..results.series import by_series, label, series_head
from ..sizes import format_size

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ABOVE = "above: check the bus factor"


def catalog() -> list[dict]:
    with open(os.path.join(HERE, "envelopes.json")) as f:
        return json.load(f)


def node_facts(doc: dict) -> dict:
    """What names a node: its GPUs' model names, GPUs a host, hosts, and (from a snapshot) the fastest
    InfiniBand port's rate and the ports a GPU."""
    machine = doc.get("machine") or {}
    hosts = machine.get("hosts") or []
    devices = ((doc.get("topology") or {}).get("gpus") or {}).get("devices") or []
    ib = ((doc.get("topology") or {}).get("host") or {}).get("infiniband") or []
    if devices:
        names, per_host = sorted({d.get("name", "") for d in devices}), len(devices)
    else:
        names = machine.get("gpus") or sorted({g.get("name", "") for g in (doc.get("config") or {}).get("gpus") or []})
        ranks = machine.get("ranks") or 0
        per_host = ranks // len(hosts) if hosts and ranks % len(hosts) == 0 else None
    rates = [p["rate_gbps"] for p in ib if p.get("rate_gbps")]
    return {"gpus": [n for n in names if n], "gpus_per_host": per_host, "hosts": len(hosts),
            "ib_gbps": max(rates) if rates else None, "ib_ports": len(ib), "snapshot": bool(devices)}


def names_node(envelope: dict, facts: dict) -> bool:
    want = envelope["node"]
    if not facts["gpus"] or not all(re.search(want["gpu"], g) for g in facts["gpus"]):
        return False
    if "exclude" in want and any(re.search(want["exclude"], g) for g in facts["gpus"]):
        return False
    if "gpus" in want and facts["gpus_per_host"] != want["gpus"]:
        return False
    if "hosts" in want and facts["hosts"] != want["hosts"]:
        return False
    if facts["hosts"] < want.get("min_hosts", 1):
        return False
    if "ib_gbps" in want:
        per_host = facts["gpus_per_host"] or 0
        return facts["ib_gbps"] == want["ib_gbps"] and facts["ib_ports"] >= want["nics_per_gpu"] * per_host > 0
    return True


def _matches(envelope: dict, h: dict, facts: dict) -> bool:
    """The envelope's operation, unforced; where the envelope names a node's GPUs a host or its NICs,
    a collective over every GPU of the allocation: 4 ranks on an 8-GPU node are not its figure."""
    whole = "gpus" not in envelope["node"] and "ib_gbps" not in envelope["node"] or \
        facts["gpus_per_host"] is not None and h.get("ranks") == facts["gpus_per_host"] * facts["hosts"]
    return h["op"] == envelope["op"] and h["impl"] == envelope["impl"] and whole and \
        h.get("mode") == envelope.get("mode") and not forced_text(h)


def placements(doc: dict) -> list[dict]:
    """Each series placed in each envelope that names its node and operation: the peak figure from the
    envelope's first size on, and where it falls."""
    facts = node_facts(doc)
    envelopes = [e for e in catalog() if names_node(e, facts)]
    out = []
    for key, recs in by_series(doc["results"]).items():
        h = series_head(key)
        for e in envelopes:
            if not _matches(e, h, facts):
                continue
            region = [r for r in recs if r["size_bytes"] >= e["from_bytes"] and r.get(e["metric"]) is not None]
            chosen = {r["nccl_choice"]["algo"] for r in region if r.get("nccl_choice")}
            if "algo" in e and chosen and chosen != {e["algo"]}:
                continue
            if not region:
                continue
            peak = max(r[e["metric"]] for r in region)
            low, high = e["range"]
            # Above a collective's range: its bus factor assumes a ring; a copy has none.
            where = "below" if peak < low else "within" if peak <= high else ABOVE if e["metric"] == "busbw_gbps" else "above"
            out.append({"series": label(key), "envelope": e["name"], "description": e["description"],
                        "metric": e["metric"], "from_bytes": e["from_bytes"], "peak": peak, "range": [low, high],
                        "placement": where, "algo_known": bool(chosen) or "algo" not in e, "source": e["source"]})
    return out


def lines(doc: dict) -> list[str]:
    """Per envelope placing the run: what it is and its source, then each series' peak and place, as
    fit, report and a run print them."""
    out: list[str] = []
    shown: set[str] = set()
    for p in placements(doc):
        metric = {"busbw_gbps": "busbw", "algbw_gbps": "algbw"}[p["metric"]]
        if p["envelope"] not in shown:
            shown.add(p["envelope"])
            out.append(f"envelope {p['envelope']}: {p['description']}: {metric} {p['range'][0]:g}-{p['range'][1]:g} GB/s "
                       f"from {format_size(p['from_bytes'])} (source: {p['source']})")
        unknown = "" if p["algo_known"] else " (which algorithm NCCL ran is not recorded)"
        out.append(f"  {p['series']}: peak {metric} {p['peak']:.1f} GB/s, {p['placement']}{unknown}")
    return out
