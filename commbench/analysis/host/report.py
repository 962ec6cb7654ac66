"""The `links` section of a host-level run and its console view: one verdict line per host
(`<host> | PASS` or `<host> | FAIL <kind>: <evidence>`, several findings joined by `; `), then the
findings with their flows. The section holds the layout, the rounds as host pairs and the findings,
so it grows with hosts x rounds; the flows themselves are the file's rows, from which `links --from`
judges a run again."""

from __future__ import annotations

import hashlib
import json
from typing import Optional

from ...errors import CommbenchError
from ...results.findings import KINDS, evidence, verdict_lines
from ...sizes import format_size
from ..links import METRICS
from .level import STAGES, Layout, Round, judge
from .verdicts import Flow

# Evidence flows shown per finding on the console (the file keeps them all).
SHOWN_FLOWS = 6
# Below this share of its NIC's rate, the typical flow between hosts hides a NIC at half rate: such a
# NIC's flows stay above the judgement's threshold of the typical one (NCCL's few channels per peer
# on many nodes cap every flow alike).
BLIND_SHARE = 0.6


def flows_from_records(records: list[dict], layout: Layout) -> list[Flow]:
    """A host-level run's flows from its rows: a rank pair's bandwidth row of one round (one way: the
    first rank of `pair` sends), with the pair's ping-pong of that round; a ping-pong alone where a
    failure came before the bandwidth. Rows of files written before rounds were numbered run as one."""
    local = layout.local()
    ping: dict[tuple, float] = {}
    bandwidth: dict[tuple, float] = {}
    for r in records:
        if r.get("schedule") in STAGES and r.get("pair") is not None:
            a, b = r["pair"]
            if r["op"] == "pingpong":
                ping[(r["schedule"], r.get("round"), min(a, b), max(a, b))] = r["time_us"]["median"]
            elif r["op"] == "bandwidth":
                bandwidth[(r["schedule"], r.get("round"), a, b)] = r["algbw_gbps"]
    flows = [layout.flow(stage, a, b, v, ping.get((stage, rnd, min(a, b), max(a, b))), local, rnd or 0)
             for (stage, rnd, a, b), v in bandwidth.items()]
    timed = {(stage, rnd, min(a, b), max(a, b)) for stage, rnd, a, b in bandwidth}
    return flows + [layout.flow(stage, a, b, None, v, local, rnd or 0)
                    for (stage, rnd, a, b), v in ping.items() if (stage, rnd, a, b) not in timed]


def round_rows(rounds: list[Round]) -> list[dict]:
    """The rounds run, as the section keeps them: stage, rank pairs measured, host pairs."""
    return [{"stage": r.stage, "pairs": len(r.pairs), "hosts": [list(p) for p in r.hosts]} for r in rounds]


def report(impl: str, layout: Layout, settings: dict, flows: list[Flow], rounds: list[dict],
           lost: Optional[dict[str, str]] = None, nics: Optional[list] = None, nic_gbps: Optional[float] = None,
           rows: Optional[list[dict]] = None) -> dict:
    """The `links` section of a host-level run; `lost`: {host: why} of hosts that died or stalled;
    `nics`: by rank, the NIC its launch pinned it to, or None (a rail's finding names its NIC);
    `nic_gbps`: the rate of rank 0's fastest NIC (nic_rate_gbps), which the typical flow is held to;
    `rows`: the file's rows the flows are, whose digest the section keeps (rows_digest)."""
    by_rail = rail_nics(layout, nics or [])
    result = judge(layout, flows, settings["threshold_pct"] / 100, settings["judged"], lost, by_rail)
    nic_gbps = settings.get("nic_gbps") if nic_gbps is None else nic_gbps
    inter = result["typical"].get("bandwidth_gbps", {}).get("inter")
    return {**settings, "impl": impl, "hosts": list(layout.hosts), "leaf_of": layout.leaf_of, "rounds": rounds,
            "nics": list(nics) if by_rail else None, "typical": result["typical"], "noise": result["noise"],
            "nic_gbps": nic_gbps, "below_nic": bool(nic_gbps and inter and inter < BLIND_SHARE * nic_gbps),
            "findings": result["findings"], "verdicts": result["verdicts"],
            "rows_digest": rows_digest(rows) if rows is not None else None}


def nic_rate_gbps(topology: Optional[dict]) -> Optional[float]:
    """The fastest NIC of a topology snapshot's host in GB/s: an InfiniBand port's rate, else a
    physical Ethernet NIC's speed; None where it knows none."""
    host = (topology or {}).get("host") or {}
    rates = [p["rate_gbps"] / 8 for p in host.get("infiniband") or [] if p.get("rate_gbps")]
    rates += [n["speed_mbps"] / 8000 for n in host.get("nics") or []
              if n.get("speed_mbps") and not n.get("virtual") and n.get("type") == "ethernet"]
    return max(rates, default=None)


def rail_nics(layout: Layout, nics: list) -> dict[tuple[str, int], str]:
    """{(host, local rank): NIC} of the ranks whose launch named one, but where every rank of a host
    names the same one: a site-wide setting (NCCL_SOCKET_IFNAME=bond0) says nothing of a rail."""
    local = layout.local()
    named: dict[str, dict[int, str]] = {}
    for r, nic in enumerate(nics):
        if nic:
            named.setdefault(layout.hosts[r], {})[local[r]] = nic
    groups = layout.groups
    return {(h, i): nic for h, mine in named.items()
            if len(groups[h]) == 1 or len(set(mine.values())) > 1 or len(mine) < len(groups[h])
            for i, nic in mine.items()}


def rejudge(section: dict, records: list[dict], threshold_pct: float, judged, source: str = "the file") -> dict:
    """An earlier host-level section judged again from its rows (another threshold or metric)."""
    layout = Layout(section["hosts"], section.get("leaf_of"))
    settings = {**section, "threshold_pct": threshold_pct, "judged": list(judged)}
    flows = read_flows(section, records, source)
    try:
        return report(section["impl"], layout, settings, flows, section["rounds"], nics=section.get("nics"), rows=records)
    except (KeyError, IndexError) as e:
        raise _mismatch(source, e) from None


def _flow_rows(records: list[dict]):
    """What flows_from_records reads of each row, in the file's order."""
    for r in records:
        if r.get("schedule") in STAGES and r.get("pair") is not None:
            yield [r["schedule"], r.get("round"), r["pair"], r["op"],
                   (r.get("time_us") or {}).get("median") if r["op"] == "pingpong" else r.get("algbw_gbps")]


def rows_digest(records: list[dict]) -> str:
    """The digest of what a host-level run's rows say of its flows, kept in its links section: a file
    whose figures were edited since would be judged again on what nobody measured."""
    text = json.dumps(list(_flow_rows(records)), separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()


def read_flows(section: dict, records: list[dict], source: str = "the file") -> list[Flow]:
    """The flows of a host-level file's rows, refused in one line where they do not match its section
    (another layout, or figures changed since the run wrote them)."""
    try:
        kept = section.get("rows_digest")
        if kept is not None and kept != rows_digest(records):
            raise CommbenchError(f"{source}: its rows are not those the run judged (their digest differs from the links "
                                 f"section's rows_digest): the figures were changed since, and are not judged again")
        return flows_from_records(records, Layout(section["hosts"], section.get("leaf_of")))
    except (KeyError, IndexError) as e:
        raise _mismatch(source, e) from None


def _mismatch(source: str, e: Exception) -> CommbenchError:
    """A file edited by hand: its rows or leaves name other ranks or hosts."""
    return CommbenchError(f"{source}: its rows and links section do not match (no {e} among its ranks or hosts): "
                          "not a host-level links file as commbench wrote it")


def _channels(section: dict) -> str:
    per_peer = (section.get("nccl_channels") or {}).get("p2p_per_peer")
    return f" (NCCL gave each peer {per_peer} channel(s))" if per_peer else ""


def lines(section: dict) -> list[str]:
    layout = Layout(section["hosts"], section.get("leaf_of"))
    groups = layout.groups
    per_host = sorted({len(r) for r in groups.values()})
    stages = {s: sum(r["stage"] == s for r in section["rounds"]) for s in STAGES}
    rounds = " + ".join(f"{n} {s}" for s, n in stages.items())
    asked = section["rounds_asked"]
    out = [f"# links, host level: {len(groups)} hosts x {'-'.join(map(str, per_host))} rank(s), {section['impl']}; "
           f"latency at {format_size(section['latency_size'])}, bandwidth at {format_size(section['bandwidth_size'])}; "
           f"rounds {rounds} ({'every host pair' if asked == 'all' else f'{asked} matchings'}, seed {section['seed']}"
           f"{', topology ' + section['topology'] if section.get('topology') else ''})",
           f"# {' and '.join(METRICS[m] for m in section['judged']) or 'nothing'} judged: a flow is slow below "
           f"{section['threshold_pct']:g} % of the typical flow of its class"]
    for metric, by_class in section["typical"].items():
        unit = "GB/s" if metric == "bandwidth_gbps" else "us"
        out.append(f"# typical {METRICS[metric]}: " + ", ".join(f"{cls}-host {v:.4g} {unit}" for cls, v in by_class.items()))
    inter = section["typical"].get("bandwidth_gbps", {}).get("inter")
    if section.get("below_nic"):
        out.append(f"# warning: the typical flow between hosts, {inter:.4g} GB/s, is {100 * inter / section['nic_gbps']:.0f} % "
                   f"of the NIC's {section['nic_gbps']:.4g} GB/s: a NIC at half its rate stays above the threshold "
                   f"and cannot be told from a healthy one{_channels(section)}")
    if section.get("noise"):
        out.append("# noise (spread of the flows' ratios): " + ", ".join(
            f"{cls}-host {100 * v:.1f} %" for cls, v in section["noise"].items()))
    out.append("#")
    out += verdict_lines(section["verdicts"])
    out.append("#")
    failing = [f for f in section["findings"] if KINDS[f["kind"]].fails]
    if not failing:
        out.append("# no slow host, rail, link or switch found")
    for f in section["findings"]:
        out.append(f"# {f['kind']} {f['subject']}: {evidence(f, f['hosts'][0]).split(': ', 1)[1]}")
        flows = f.get("flows") or []
        if flows and KINDS[f["kind"]].fails:
            shown = ", ".join(f"{a} ranks {rail} {100 * r:.0f} %" if a == b else f"{a} -> {b} rail {rail} {100 * r:.0f} %"
                              for a, b, rail, r in flows[:SHOWN_FLOWS])
            more = f" and {len(flows) - SHOWN_FLOWS} more" if len(flows) > SHOWN_FLOWS else ""
            out.append(f"#   flows: {shown}{more}")
    return out
