"""Which host, rail, host pair or leaf switch is bad, from the flows of a host-level `links` run
(host_schedule.py): one verdict per host and the findings with their evidence.

Every flow is judged against the typical flow of its class (intra-host or inter-host): the median over
hosts of each host's upper-quartile flow (typical()), so that slow hosts and a slow leaf move it little. A flow is slow below
`threshold` of it (bandwidth; latency above typical / threshold). Slow flows are then explained, the
widest cause first, and every host stays healthy until evidence says otherwise:
1. a leaf switch (with a topology): every host below it is slow to other leaves (AGREE of its
   cross-leaf flows) while the flows inside the leaf are healthy; its cross-leaf flows are explained;
2. rails and hosts, repeated until nothing changes: a host is trusted while none of its flows is slow
   and unexplained. A suspect's rail i is bad when AGREE of its flows on rail i with trusted partners
   are slow (with all its partners where fewer than two are trusted, as in a cluster of three); a host
   whose every rail is bad is a bad host. Their flows are explained;
3. a link: a host pair (on one rail or more) slow in most of its measurements with neither end bad,
   which the confirmation stage has measured twice and whose ends it has met with healthy partners.
Intra-host flows are judged per host as `links` judges ranks (analysis/links.attribute).

A finding FAILs the hosts in its scope: a host or rail its host, a link both ends, a switch every host
below it, and a host that died or stalled reads `lost`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

import numpy as np

from .links import attribute as attribute_ranks

# Share of a subject's evidence that must be slow to condemn it: one partner of four may disagree.
AGREE = 0.75
# Trusted partners a suspect is retested against in the confirmation stage.
CONFIRM_PARTNERS = 2
# Measurements of a host pair on a rail before it can be named a slow link.
LINK_MEASUREMENTS = 2
KINDS = ("lost", "untested", "switch", "host", "rail", "link", "rank", "pair")


@dataclass(frozen=True, slots=True)
class Flow:
    """One measured flow: local rank `la` of host `a` with local rank `lb` of host `b` (for an
    inter-host flow la == lb, its rail), in stage `stage` (intra, inter or confirm)."""
    stage: str
    a: str
    b: str
    la: int
    lb: int
    bandwidth_gbps: Optional[float]
    latency_us: Optional[float] = None


def typical(flows: list[Flow], metric: str) -> dict[str, float]:
    """{class: the median over hosts of each host's upper-quartile flow} for metric (an attribute of
    Flow): a host keeps its healthy figure while up to three quarters of its flows are slow (a leaf
    fault slows half of a host's flows by design of the rounds), and a few slow hosts do not move the
    median over hosts. Latency's healthy end is its low one."""
    per_host: dict[tuple[str, str], list[float]] = {}
    for f in flows:
        v = getattr(f, metric)
        if v is None:
            continue
        cls = "intra" if f.a == f.b else "inter"
        for h in {f.a, f.b}:
            per_host.setdefault((cls, h), []).append(v)
    by_class: dict[str, list[float]] = {}
    for (cls, _h), values in per_host.items():
        by_class.setdefault(cls, []).append(float(np.percentile(values, 75 if metric == "bandwidth_gbps" else 25)))
    return {cls: float(np.median(medians)) for cls, medians in by_class.items()}


def ratios(flows: list[Flow], judged: Iterable[str]) -> tuple[list[float], dict]:
    """Each flow's figure against its class's typical one, oriented so that below 1 is worse (the
    worst of the judged metrics), and the typical values {metric: {class: value}}."""
    typ = {m: typical(flows, m) for m in judged}
    out = []
    for f in flows:
        cls = "intra" if f.a == f.b else "inter"
        worst = 1.0
        for m, by_class in typ.items():
            v, t = getattr(f, m), by_class.get(cls)
            if v is None or not t:
                continue
            r = (v / t if m == "bandwidth_gbps" else t / v) if v > 0 else 0.0
            worst = min(worst, r)
        out.append(worst)
    return out, typ


def _share(flags: list[bool]) -> float:
    return sum(flags) / len(flags) if flags else 0.0


class _Evidence:
    """The inter-host flows of a run with their judgement, indexed by host, and what is explained."""

    def __init__(self, flows: list[Flow], ratio: list[float], threshold: float):
        self.flows, self.ratio = flows, ratio
        self.slow = [r < threshold for r in ratio]
        self.explained = [False] * len(flows)
        self.of: dict[str, list[int]] = {}
        for i, f in enumerate(flows):
            self.of.setdefault(f.a, []).append(i)
            self.of.setdefault(f.b, []).append(i)

    def other(self, i: int, h: str) -> str:
        f = self.flows[i]
        return f.b if f.a == h else f.a

    def open_slow(self, i: int) -> bool:
        return self.slow[i] and not self.explained[i]

    def trusted(self) -> set[str]:
        return {h for h, idx in self.of.items() if not any(self.open_slow(i) for i in idx)}

    def flow_row(self, i: int) -> list:
        f = self.flows[i]
        return [f.a, f.b, f.la, round(self.ratio[i], 3)]


def attribute(flows: list[Flow], ratio: list[float], hosts: list[str], threshold: float,
              leaf_of: Optional[dict[str, str]] = None, lost: Optional[dict[str, str]] = None,
              nics: Optional[dict[tuple[str, int], str]] = None) -> list[dict]:
    """The findings of a host-level run: `hosts` in their order, `lost` {host: why}, `nics` {(host,
    local rank): NIC name} where the topology snapshot knows it."""
    lost = lost or {}
    found = [{"kind": "lost", "subject": h, "hosts": [h], "why": why} for h, why in lost.items()]
    keep = [i for i, f in enumerate(flows) if f.a not in lost and f.b not in lost]
    inter = [i for i in keep if flows[i].a != flows[i].b]
    ev = _Evidence([flows[i] for i in inter], [ratio[i] for i in inter], threshold)
    rails = {h: 1 + max(ev.flows[i].la for i in idx) for h, idx in ev.of.items()}
    if leaf_of:
        found += _switches(ev, hosts, leaf_of, lost)
    found += _hosts_and_rails(ev, rails, nics or {})
    found += _links(ev)
    if len(hosts) > 1:
        # A host that met no other (an idle one of an odd count, one not reached before a failure)
        # was not shown good.
        found += [{"kind": "untested", "subject": h, "hosts": [h]} for h in dict.fromkeys(hosts)
                  if h not in ev.of and h not in lost]
    intra = [i for i in keep if flows[i].a == flows[i].b]
    found += _intra([flows[i] for i in intra], [ratio[i] for i in intra], threshold)
    order = {h: k for k, h in enumerate(hosts)}
    found.sort(key=lambda f: (KINDS.index(f["kind"]), min(order[h] for h in f["hosts"]), f["subject"]))
    return found


def _switches(ev: _Evidence, hosts: list[str], leaf_of: dict[str, str], lost: dict) -> list[dict]:
    cross: dict[str, list[int]] = {}
    within: dict[str, list[int]] = {}
    for i, f in enumerate(ev.flows):
        if leaf_of[f.a] != leaf_of[f.b]:
            cross.setdefault(f.a, []).append(i)
            cross.setdefault(f.b, []).append(i)
        else:
            within.setdefault(leaf_of[f.a], []).append(i)
    members: dict[str, list[str]] = {}
    for h in hosts:
        if h not in lost:
            members.setdefault(leaf_of[h], []).append(h)
    found = []
    # The clearest leaf first, its flows then explained: a healthy leaf whose hosts happened to meet
    # the slow leaf's hosts in most of their cross-leaf flows is judged on its other flows. Leaves
    # alike in evidence (two leaves only: every cross flow joins them) are named together.
    while True:
        scores = {}
        for leaf, below in members.items():
            if any(f["subject"] == leaf for f in found):
                continue
            score = _leaf_score(ev, below, cross, within.get(leaf, []))
            if score is not None:
                scores[leaf] = score
        if not scores:
            return found
        best = max(scores.values())
        explained = []
        for leaf in [leaf for leaf, score in scores.items() if score == best]:
            below = members[leaf]
            reached = [h for h in below if any(not ev.explained[i] for i in cross.get(h, []))]
            mine = sorted({i for h in reached for i in cross[h] if not ev.explained[i]})
            slow = [i for i in mine if ev.slow[i]]
            inside = within.get(leaf, [])
            found.append({"kind": "switch", "subject": leaf, "hosts": below, "flows": [ev.flow_row(i) for i in slow],
                          "ratio": float(np.median([ev.ratio[i] for i in slow])), "agreed": len(reached),
                          "partners": len({ev.other(i, h) for h in reached for i in cross[h]}),
                          "inside": float(np.median([ev.ratio[i] for i in inside]))})
            explained += mine
        for i in explained:
            ev.explained[i] = True


def _leaf_score(ev: _Evidence, below: list[str], cross: dict, inside: list[int]) -> Optional[float]:
    """The least share of slow cross-leaf flows over the hosts below a leaf (unexplained flows), where
    every one of them reaches AGREE and the flows inside the leaf are healthy; None otherwise."""
    shares = []
    for h in below:
        mine = [i for i in cross.get(h, []) if not ev.explained[i]]
        if mine:
            shares.append(_share([ev.slow[i] for i in mine]))
    # A leaf of one host, or one never measured inside, cannot be told from its hosts.
    if len(shares) < 2 or not inside or _share([ev.slow[i] for i in inside]) >= 0.5 or min(shares) < AGREE:
        return None
    return min(shares)


def _hosts_and_rails(ev: _Evidence, rails: dict[str, int], nics: dict) -> list[dict]:
    bad: dict[tuple[str, int], dict] = {}
    while True:
        trusted = ev.trusted()
        new = {}
        for h, idx in ev.of.items():
            if h in trusted:
                continue
            for rail in range(rails[h]):
                if (h, rail) in bad:
                    continue
                mine = [i for i in idx if ev.flows[i].la == rail and not ev.explained[i]]
                good = [i for i in mine if ev.other(i, h) in trusted]
                use = good if len({ev.other(i, h) for i in good}) >= 2 else mine
                partners = {ev.other(i, h) for i in use}
                agreed = {ev.other(i, h) for i in use if ev.slow[i]}
                if len(partners) >= 2 and len(agreed) >= AGREE * len(partners):
                    slow = [i for i in use if ev.slow[i]]
                    new[(h, rail)] = {"flows": slow, "agreed": len(agreed), "partners": len(partners)}
        if not new:
            break
        bad.update(new)
        for (h, rail) in new:
            for i in ev.of[h]:
                if ev.flows[i].la == rail:
                    ev.explained[i] = True
    found = []
    for h in dict.fromkeys(h for h, _ in bad):
        mine = [bad[(h, r)] for r in range(rails[h]) if (h, r) in bad]
        whole = len(mine) == rails[h]
        parts = mine if whole else []
        if whole:
            slow = [i for m in parts for i in m["flows"]]
            found.append({"kind": "host", "subject": h, "hosts": [h], "rails": rails[h],
                          "flows": [ev.flow_row(i) for i in slow], "ratio": float(np.median([ev.ratio[i] for i in slow])),
                          "agreed": min(m["agreed"] for m in parts), "partners": max(m["partners"] for m in parts)})
            continue
        for rail in range(rails[h]):
            m = bad.get((h, rail))
            if m:
                found.append({"kind": "rail", "subject": f"{h}:{rail}", "hosts": [h], "rail": rail,
                              "nic": nics.get((h, rail)), "flows": [ev.flow_row(i) for i in m["flows"]],
                              "ratio": float(np.median([ev.ratio[i] for i in m["flows"]])),
                              "agreed": m["agreed"], "partners": m["partners"]})
    return found


def _links(ev: _Evidence) -> list[dict]:
    by_pair: dict[tuple[str, str], list[int]] = {}
    for i, f in enumerate(ev.flows):
        if not ev.explained[i]:
            by_pair.setdefault(tuple(sorted((f.a, f.b))), []).append(i)
    found = []
    for (a, b), idx in by_pair.items():
        if not any(ev.slow[i] for i in idx):
            continue
        per_rail: dict[int, list[int]] = {}
        for i in idx:
            per_rail.setdefault(ev.flows[i].la, []).append(i)
        # Measured twice at least (the confirmation measures a suspect pair again): one slow
        # measurement alone is no evidence against a host pair.
        slow_rails = sorted(r for r, mine in per_rail.items()
                            if len(mine) >= LINK_MEASUREMENTS and _share([ev.slow[i] for i in mine]) > 0.5)
        if not slow_rails:
            continue
        slow = [i for r in slow_rails for i in per_rail[r] if ev.slow[i]]
        found.append({"kind": "link", "subject": f"{a}-{b}", "hosts": [a, b], "rails_slow": slow_rails,
                      "flows": [ev.flow_row(i) for i in slow], "ratio": float(np.median([ev.ratio[i] for i in slow])),
                      "agreed": len(slow), "partners": len(idx),
                      "others": {h: len({ev.other(i, h) for i in ev.of[h]} - {a, b}) for h in (a, b)}})
    return found


def _intra(flows: list[Flow], ratio: list[float], threshold: float) -> list[dict]:
    """Within each host, the ranks or rank pairs far below the typical intra-host pair."""
    by_host: dict[str, list[int]] = {}
    for i, f in enumerate(flows):
        by_host.setdefault(f.a, []).append(i)
    found = []
    for h, idx in by_host.items():
        flagged = [{"pair": [flows[i].la, flows[i].lb], "ratio": ratio[i]} for i in idx if ratio[i] < threshold]
        if not flagged:
            continue
        size = 1 + max(max(flows[i].la, flows[i].lb) for i in idx)
        for f in attribute_ranks(flagged, [h] * size):
            kind = "rank" if f["kind"] == "rank" else "pair"
            found.append({"kind": kind, "subject": f"{h}:{f['subject']}", "hosts": [h], "local": f["ranks"],
                          "flows": [[h, h, f"{p[0]}-{p[1]}", round(r, 3)] for p, r in
                                    ((x["pair"], x["ratio"]) for x in flagged) if set(p) & set(f["ranks"])],
                          "ratio": f["ratio"], "agreed": len(f["pairs"]), "partners": size - 1})
    return found


def _pct(ratio: float) -> str:
    return f"{100 * ratio:.0f} % of the typical flow"


def evidence(f: dict, host: str) -> str:
    """A finding as `<kind>: <evidence>` on the verdict line of `host`, one of its hosts."""
    kind = f["kind"]
    if kind == "lost":
        return f"lost: {f['why']}"
    if kind == "untested":
        return "untested: no flow with another host was measured"
    if kind == "switch":
        return (f"switch: {f['subject']}: flows to other leaves at {_pct(f['ratio'])} from all {f['agreed']} hosts "
                f"below it ({len(f['flows'])} flows, {f['partners']} partners), {100 * f['inside']:.0f} % inside the leaf")
    if kind == "host":
        return f"host: {_pct(f['ratio'])} with {f['agreed']} of {f['partners']} partners on every rail ({f['rails']})"
    if kind == "rail":
        nic = f" ({f['nic']})" if f.get("nic") else ""
        return f"rail: local rank {f['rail']}{nic}: {_pct(f['ratio'])} with {f['agreed']} of {f['partners']} partners"
    if kind == "link":
        other = next(h for h in f["hosts"] if h != host)
        rails = ",".join(map(str, f["rails_slow"]))
        return (f"link: {other}: {_pct(f['ratio'])} on rail {rails} in {f['agreed']} of {f['partners']} flows, "
                f"healthy with its {f['others'][host]} other partner(s)")
    local = "-".join(map(str, f["local"]))
    if kind == "rank":
        return f"rank: local rank {local}: {_pct(f['ratio'])} with {f['agreed']} of its {f['partners']} peers in the host"
    return f"pair: local ranks {local}: {_pct(f['ratio'])} inside the host"


def verdicts(findings: list[dict], hosts: list[str]) -> dict[str, str]:
    """{host: 'PASS' or 'FAIL <kind>: <evidence>[; ...]'} for every host, in order."""
    mine: dict[str, list[str]] = {h: [] for h in dict.fromkeys(hosts)}
    for f in findings:
        for h in f["hosts"]:
            mine[h].append(evidence(f, h))
    return {h: "FAIL " + "; ".join(texts) if texts else "PASS" for h, texts in mine.items()}


def verdict_lines(verdict: dict[str, str]) -> list[str]:
    width = max((len(h) for h in verdict), default=0)
    return [f"{h:<{width}} | {v}" for h, v in verdict.items()]


def named(findings: list[dict]) -> set[str]:
    """The findings as the specs `links_at_scale.py` plants: host:H, rail:H:I, link:A:B, switch:LEAF."""
    out = set()
    for f in findings:
        if f["kind"] in ("host", "switch", "lost", "untested"):
            out.add(f"{f['kind']}:{f['subject']}")
        elif f["kind"] == "rail":
            out.add(f"rail:{f['hosts'][0]}:{f['rail']}")
        elif f["kind"] == "link":
            out.add("link:" + ":".join(sorted(f["hosts"])))
        else:
            out.add(f"{f['kind']}:{f['subject']}")
    return out


def confirmation_needs(flows: list[Flow], ratio: list[float], threshold: float, findings: list[dict]
                       ) -> tuple[dict[str, int], list[tuple[str, str]], set[str]]:
    """What the confirmation stage retests after the first judgement: ({host: trusted partners it
    needs} for every host in a finding's scope and every end of a slow flow no finding explains, the
    host pairs named as links, to measure again; the hosts trusted to be partners)."""
    scope = {h for f in findings if f["kind"] not in ("rank", "pair", "untested") for h in f["hosts"]}
    lost = {h for f in findings if f["kind"] == "lost" for h in f["hosts"]}
    loose: set[tuple[str, str]] = set()
    for f, r in zip(flows, ratio):
        if f.a != f.b and r < threshold and not {f.a, f.b} & scope:
            loose.add((f.a, f.b) if f.a < f.b else (f.b, f.a))
    needs = {h: CONFIRM_PARTNERS for h in sorted(scope | {h for pair in loose for h in pair}) if h not in lost}
    again = sorted(loose)
    inter = {h for f in flows if f.a != f.b for h in (f.a, f.b)}
    return needs, again, inter - needs.keys() - lost
