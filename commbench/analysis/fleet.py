"""`commbench fleet`: many nodes' result files side by side. Each node's headline figures (busbw at
the largest size, time at the smallest, copy bandwidths, and per host the links' pair figures) are
set against the other nodes of its SKU, and a node that stands apart by a robust statistic (the
modified z-score on the median and MAD per SKU and metric) is named, whether or not it passed its
own thresholds. Only figures of one node are a node's: a run across hosts gives per-host figures
through its links section alone."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..collectives import COPIES, names
from ..results.series import by_series, series_head, variant, where
from ..results.stats import modified_z
from ..sizes import format_size
from .sku import sku_of

# The data of a plain sweep (a collective's default, a copy's bytes): left out of a metric's name.
PLAIN_DATA = {"float32", "uint8", "sum", "none", None}
Z_THRESHOLD = 3.5  # Iglewicz and Hoaglin's customary cut
# The MAD is taken as at least this share of the median: a fleet of nearly equal figures would
# otherwise make a 1 % difference a large z.
MAD_FLOOR_SHARE = 0.01


def _collective_metrics(records: list[dict], config: dict) -> dict[str, tuple[float, bool]]:
    """{metric: (value, higher is better)} of one node's records. A metric names all that sets its
    figure apart (series, rank count or pair, data type and reduction where not the plain ones, a
    CUDA graph, a rank held back), so that only like figures are set side by side."""
    out: dict[str, tuple[float, bool]] = {}
    delay = config.get("delay")
    run = (" graph" if config.get("graph") else "") + (f" delay {delay['rank']}:{delay['us']:g}" if delay else "")
    for key, recs in by_series(records).items():
        h = series_head(key)
        data = "".join(f" {h[k]}" for k in ("dtype", "redop") if h.get(k) not in PLAIN_DATA)
        who = f"{h['op']} {variant(h)} ({where(key)}){data}{run}"
        moved = [r for r in recs if r["size_bytes"] > 0 and r["time_us"]["median"] > 0]
        if not moved:
            continue
        if h["op"] in names():
            largest, smallest = moved[-1], moved[0]
            if largest["busbw_gbps"] is not None:
                out[f"{who} busbw@{format_size(largest['size_bytes'])} (GB/s)"] = (largest["busbw_gbps"], True)
            out[f"{who} time@{format_size(smallest['size_bytes'])} (us)"] = (smallest["time_us"]["median"], False)
        elif h["op"] == "pingpong" and h.get("schedule") is None:
            out[f"{who} latency@{format_size(moved[0]['size_bytes'])} (us)"] = (moved[0]["time_us"]["median"], False)
        elif h["op"] == "bandwidth" and h.get("schedule") is None:
            out[f"{who} bw@{format_size(moved[-1]['size_bytes'])} (GB/s)"] = (moved[-1]["algbw_gbps"], True)
        elif h["op"] in COPIES:
            out[f"{who} {h['op']}@{format_size(moved[-1]['size_bytes'])} (GB/s)"] = (moved[-1]["algbw_gbps"], True)
    return out


def _host_level_metrics(section: dict, records: list[dict], source: str) -> dict[str, dict[str, tuple[float, bool]]]:
    """{host: {metric: (value, higher is better)}} of a host-level links run: each host's median flow,
    inter-host and intra-host apart (the flows are its rows)."""
    from .host.report import read_flows
    values: dict[tuple[str, str, str], list[float]] = {}
    for f in read_flows(section, records, source):
        cls = "intra-host" if f.a == f.b else "inter-host"
        for metric, v in (("bandwidth_gbps", f.bandwidth_gbps), ("latency_us", f.latency_us)):
            if v is not None:
                for h in {f.a, f.b}:
                    values.setdefault((h, cls, metric), []).append(v)
    out: dict[str, dict[str, tuple[float, bool]]] = {}
    for (h, cls, metric), vs in values.items():
        out.setdefault(h, {})[_links_name(cls, metric)] = (float(np.median(vs)), metric == "bandwidth_gbps")
    return out


def _links_name(cls: str, metric: str) -> str:
    higher = metric == "bandwidth_gbps"
    return f"links {cls} {'bandwidth' if higher else 'latency'} ({'GB/s' if higher else 'us'})"


def _links_metrics(section: dict) -> dict[str, dict[str, tuple[float, bool]]]:
    """{host: {metric: (value, higher is better)}}: each host's median pair, one pair at a time, of
    the pairs that touch it, inter-host and intra-host apart."""
    hosts = section["hosts"]
    out: dict[str, dict[str, tuple[float, bool]]] = {}
    for metric, grid in section["matrices"]["clean"].items():
        higher = metric == "bandwidth_gbps"
        for host in dict.fromkeys(hosts):
            mine = [r for r, h in enumerate(hosts) if h == host]
            for cls, inter in (("inter-host", True), ("intra-host", False)):
                values = [grid[a][b] for a in mine for b in range(len(hosts))
                          if b != a and (hosts[b] != host) == inter and grid[a][b] is not None]
                if values:
                    out.setdefault(host, {})[_links_name(cls, metric)] = (float(np.median(values)), higher)
    return out


def node_figures(doc: dict, source: str = "the file") -> dict[str, dict[str, tuple[float, bool]]]:
    """{host: {metric: (value, higher is better)}} that one result file gives of its nodes."""
    out: dict[str, dict[str, tuple[float, bool]]] = {}
    if doc.get("links", {}).get("level") == "host":
        out.update(_host_level_metrics(doc["links"], doc["results"], source))
    elif doc.get("links"):
        out.update(_links_metrics(doc["links"]))
    hosts = set(doc["machine"]["hosts"])
    if len(hosts) == 1:
        records = [r for r in doc["results"] if r.get("schedule") is None]
        out.setdefault(hosts.pop(), {}).update(_collective_metrics(records, doc.get("config") or {}))
    return out


def analyse(docs: list[tuple[str, dict]], threshold: float = Z_THRESHOLD) -> dict:
    """The fleet of `docs` ((source, document) each): nodes, their SKU and figures (the median over a
    node's files where several give one figure), each SKU's median and MAD per metric, and the
    outliers, the farthest first."""
    nodes: dict[str, dict] = {}
    verdicts: dict[str, list[dict]] = {}
    for source, doc in docs:
        if doc.get("links", {}).get("level") == "host":
            for host, verdict in doc["links"]["verdicts"].items():
                verdicts.setdefault(host, []).append({"source": source, "verdict": verdict})
        sku = sku_of(doc)
        for host, figures in node_figures(doc, source).items():
            node = nodes.setdefault(host, {"sku": sku, "sources": [], "values": {}})
            node["sources"].append(source)
            for metric, (value, higher) in figures.items():
                node["values"].setdefault(metric, ([], higher))[0].append(value)
    for node in nodes.values():
        node["metrics"] = {m: float(np.median(v)) for m, (v, _) in node["values"].items()}
        node["higher"] = {m: higher for m, (_, higher) in node["values"].items()}
        del node["values"]
    skus: dict[str, dict] = {}
    outliers = []
    for sku in sorted({n["sku"] for n in nodes.values()}):
        members = sorted(h for h, n in nodes.items() if n["sku"] == sku)
        metrics = sorted({m for h in members for m in nodes[h]["metrics"]})
        summary = {}
        for metric in metrics:
            having = [h for h in members if metric in nodes[h]["metrics"]]
            values = np.array([nodes[h]["metrics"][metric] for h in having])
            median = float(np.median(values))
            mad = float(np.median(np.abs(values - median)))
            higher = nodes[having[0]]["higher"][metric]
            summary[metric] = {"nodes": len(having), "median": median, "mad": mad, "higher_is_better": higher}
            if len(having) < 3:  # two nodes cannot say which of them stands apart
                continue
            for host, z in zip(having, modified_z(values, MAD_FLOOR_SHARE * abs(median))):
                if abs(z) > threshold:
                    outliers.append({"node": host, "sku": sku, "metric": metric, "value": nodes[host]["metrics"][metric],
                                     "median": median, "z": float(z), "worse": bool((z < 0) == higher)})
        skus[sku] = {"nodes": members, "metrics": summary}
    outliers.sort(key=lambda o: -abs(o["z"]))
    return {"threshold": threshold, "mad_floor_share": MAD_FLOOR_SHARE, "files": len(docs),
            "nodes": {h: {k: n[k] for k in ("sku", "sources", "metrics")} for h, n in sorted(nodes.items())},
            "skus": skus, "outliers": outliers, "verdicts": dict(sorted(verdicts.items()))}


def lines(fleet: dict) -> list[str]:
    """The ranked table of outliers under a header that says how they were found."""
    out = [f"# fleet: {len(fleet['nodes'])} node(s) from {fleet['files']} result file(s), {len(fleet['skus'])} SKU(s)",
           f"# outlier: |modified z| = |0.6745 (x - median) / MAD| > {fleet['threshold']:g} among the nodes of its SKU "
           f"(MAD at least {100 * fleet['mad_floor_share']:g} % of the median; 3 nodes or more)"]
    for sku, s in fleet["skus"].items():
        out.append(f"# SKU {sku}: {len(s['nodes'])} node(s), {len(s['metrics'])} metric(s)")
    out += verdict_lines(fleet["verdicts"])
    if not fleet["outliers"]:
        return out + ["no node stands apart from its fleet"]
    width = max(len(o["metric"]) for o in fleet["outliers"])
    node_width = max(len(o["node"]) for o in fleet["outliers"])
    out.append(f"{'rank':>4}  {'node':<{node_width}}  {'metric':<{width}}  {'value':>10}  {'median':>10}  {'z':>7}")
    for i, o in enumerate(fleet["outliers"], 1):
        out.append(f"{i:>4}  {o['node']:<{node_width}}  {o['metric']:<{width}}  {o['value']:>10.4g}  "
                   f"{o['median']:>10.4g}  {o['z']:>7.1f}  {'worse' if o['worse'] else 'better'} than its fleet")
    return out


def failed_hosts(fleet: dict) -> list[str]:
    """Hosts that a host-level links run of the fleet FAILed."""
    return [h for h, vs in fleet["verdicts"].items() if any(v["verdict"] != "PASS" for v in vs)]


def verdict_lines(verdicts: dict[str, list[dict]]) -> list[str]:
    """The host-level links verdicts beside the figures: how many hosts passed, each FAIL as its
    run wrote it (with the file it came from)."""
    if not verdicts:
        return []
    failed = [(h, v) for h, vs in verdicts.items() for v in vs if v["verdict"] != "PASS"]
    out = [f"# links verdicts (host level): {len(verdicts) - len({h for h, _ in failed})} of {len(verdicts)} host(s) PASS"]
    return out + [f"{h} | {v['verdict']}  ({v['source']})" for h, v in failed]


def plot(fleet: dict, path: str, sku: Optional[str] = None) -> None:
    """A heat map of nodes x metrics, each cell the node's modified z-score in its SKU (clipped to
    +-10, oriented so that low is worse), outliers marked; one SKU (default: the largest)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    sku = sku or max(fleet["skus"], key=lambda k: len(fleet["skus"][k]["nodes"]))
    s = fleet["skus"][sku]
    hosts, metrics = s["nodes"], list(s["metrics"])
    z = np.full((len(hosts), len(metrics)), np.nan)
    for j, metric in enumerate(metrics):
        have = [i for i, h in enumerate(hosts) if metric in fleet["nodes"][h]["metrics"]]
        if len(have) < 3:
            continue
        values = [fleet["nodes"][hosts[i]]["metrics"][metric] for i in have]
        median = s["metrics"][metric]["median"]
        higher = s["metrics"][metric]["higher_is_better"]
        scores = modified_z(values, MAD_FLOOR_SHARE * abs(median)) * (1 if higher else -1)
        z[have, j] = np.clip(scores, -10, 10)
    fig, ax = plt.subplots(figsize=(2 + 1.2 * len(metrics), 2 + min(0.25 * len(hosts), 40)))
    image = ax.imshow(z, aspect="auto", cmap="RdYlGn", vmin=-10, vmax=10, interpolation="nearest")
    marked = {(o["node"], o["metric"]) for o in fleet["outliers"] if o["sku"] == sku}
    for i, h in enumerate(hosts):
        for j, m in enumerate(metrics):
            if (h, m) in marked:
                ax.text(j, i, "x", ha="center", va="center", fontsize=8, color="black")
    ax.set_xticks(range(len(metrics)), metrics, rotation=30, ha="right", fontsize=7)
    ax.set_yticks(range(len(hosts)), hosts if len(hosts) <= 60 else [""] * len(hosts), fontsize=7)
    ax.set_title(f"{sku}: modified z per metric (low = worse), outliers x", fontsize=9)
    fig.colorbar(image, ax=ax, shrink=0.6)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)
