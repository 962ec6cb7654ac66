"""Which host, rail (and which way), host pair, leaf switch or leaf uplink is bad, from the flows of a
host-level `links` run (host_schedule.py): the findings with their evidence, and what the confirmation
stage measures again.

A real fabric is not clean: flows vary by several percent from round to round; on ECMP fabrics the flows
of a loaded round that hash onto one spine uplink share it (a random share of the cross-leaf flows run at
half rate, different each round); worn hosts run a little slow yet within spec. A false FAIL drains a
healthy node, so no single slow flow condemns anything, and nothing is OR-ed over many flows.

A flow is one direction: host `a` sends, host `b` receives, on rail `la` (== `lb` between hosts). Each
flow is judged against the typical flow of its class (intra-host or inter-host): the median over hosts of
each host's upper-quartile flow (typical()), so that slow hosts and a slow leaf move it little; it is
slow below `threshold` of it (latency: above typical / threshold). The run's own noise (noise(): each
host's spread of its flows' log ratios, the median over hosts) sets how sure a median of a few flows is.
Every host is healthy until evidence says otherwise; the widest cause is explained first:
1. switch: every host below a leaf slow to other leaves (AGREE of its cross-leaf flows), the flows inside
   the leaf healthy;
2. uplink: a leaf's cross-leaf flows slow more often than the other leaves' flows of the same rounds, by a
   margin that chance does not give (binomial tail below UPLINK_P) and by UPLINK_EXCESS of its flows at
   least: a degraded uplink slows the share of flows that ECMP hashes onto it;
3. subjects, one per rail of a host and way (tx: where it sends, rx: where it receives), each judged on its
   own. A subject is a suspect after the first rounds where AGREE of its partners found it slow (partners
   whose own side is no suspect, where two or more are); it is bad where the confirmation rounds, light
   enough not to collide, measure it CONFIRMATIONS times and its median flow stays below the threshold by
   MARGIN_Z standard errors of such a median. A rail bad both ways is a rail, one way an rx or tx, every
   rail of a host bad a host;
4. link: one rail of a host pair slow both ways in the first rounds and again, each way, in the
   confirmation rounds (the same median rule), neither end bad; UPLINK_LINKS links or more through one
   leaf's uplinks, from two of its hosts or more, are that leaf's uplink (a connection that keeps its
   path keeps a degraded uplink's slowness, and a small cluster has too few flows to show it by share).
A suspect that the light rounds find healthy is a transient: reported with its counts, no FAIL.
Intra-host flows are judged per host as `links` judges ranks (analysis/links.attribute). Each finding
carries how many measurements agreed (`agreed`) out of how many (`measured`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Optional

import numpy as np

from ...results.findings import ORDER
from ..links import attribute as attribute_ranks

# Share of a subject's partners that must find it slow to suspect it (one partner of four may disagree).
AGREE = 0.75
# Light-round measurements of each suspect: partners for a suspect host, repeats for a suspect host pair.
CONFIRMATIONS = 3
# How many standard errors of its median a suspect's flows must stay below the threshold by.
MARGIN_Z = 2.0
# A median's standard error over the mean's, for normal noise: sqrt(pi / 2).
MEDIAN_SE = math.sqrt(math.pi / 2)
# The least noise assumed, whatever few flows say: a measurement is never exact.
NOISE_FLOOR = 0.01
# A leaf's excess of slow cross-leaf flows: chance below UPLINK_P names its uplink, below
# UPLINK_SUSPECT_P probes it in the confirmation rounds; either needs UPLINK_EXCESS more of its flows.
UPLINK_P = 1e-6
UPLINK_SUSPECT_P = 1e-3
UPLINK_EXCESS = 0.03
# Host pairs found slow as links through one leaf's uplinks, from two of its hosts or more, that are one
# uplink rather than as many links: where a connection keeps its path for its life (TCP, RDMA queue pairs
# on ECMP), a degraded uplink slows a fixed share of its leaf's connections, each slow both ways and again
# when measured again, as a bad cable would be. A small cluster has too few flows to show it by share.
UPLINK_LINKS = 3
# Cross-leaf flows of a round outside a leaf needed to say what the round's chance of a slow one is;
# in a small cluster, of its rounds together (each has few): estimated as (slow + 1) / (flows + 2), 8
# healthy flows already say a chance of one in ten, against which a leaf's uplink is named only where
# about half its flows are slow.
BASELINE_FLOWS = 20
POOLED_BASELINE_FLOWS = 8
FIRST, CONFIRM = "inter", "confirm"

Subject = tuple[str, int, str]  # (host, rail, 'tx' or 'rx')
RailPair = tuple[str, str, int]  # (host, host in order of name, rail)


@dataclass(frozen=True, slots=True)
class Flow:
    """One measured flow: local rank `la` of host `a` sends to local rank `lb` of host `b` (between
    hosts la == lb, its rail), in round `round` of stage `stage` (intra, inter or confirm)."""
    stage: str
    a: str
    b: str
    la: int
    lb: int
    bandwidth_gbps: Optional[float]
    latency_us: Optional[float] = None
    round: int = 0


def typical(flows: list[Flow], metric: str) -> dict[str, float]:
    """{class: the median over hosts of each host's upper-quartile flow} for metric (an attribute of
    Flow): a host keeps its healthy figure while up to three quarters of its flows are slow (a leaf
    fault slows half of a host's flows by design of the rounds), and a few slow hosts do not move the
    median over hosts. Latency's healthy end is its low one."""
    keys: dict[tuple[str, str], int] = {}
    group, values = [], []
    for f in flows:
        v = getattr(f, metric)
        if v is None:
            continue
        cls = "intra" if f.a == f.b else "inter"
        for h in (f.a,) if f.a == f.b else (f.a, f.b):
            group.append(keys.setdefault((cls, h), len(keys)))
            values.append(v)
    if not keys:
        return {}
    q = _group_percentiles(np.asarray(group), np.asarray(values, dtype=float), len(keys),
                           0.75 if metric == "bandwidth_gbps" else 0.25)
    by_class: dict[str, list[float]] = {}
    for (cls, _h), k in keys.items():
        by_class.setdefault(cls, []).append(float(q[k]))
    return {cls: float(np.median(v)) for cls, v in by_class.items()}


def _group_percentiles(group: np.ndarray, values: np.ndarray, count: int, q: float) -> np.ndarray:
    """Each group's q-quantile, interpolated as numpy.percentile's default, for all groups at once."""
    order = np.lexsort((values, group))
    group, values = group[order], values[order]
    sizes = np.bincount(group, minlength=count)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    pos = q * (sizes - 1)
    lo = np.floor(pos).astype(int)
    hi = np.minimum(lo + 1, sizes - 1)
    frac = pos - lo
    return values[starts + lo] * (1 - frac) + values[starts + hi] * frac


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


def noise(flows: list[Flow], ratio: list[float]) -> dict[str, float]:
    """{class: the spread of its flows' log ratios}: each host's median absolute deviation over its
    flows (scaled to a normal sigma), the median over hosts, at least NOISE_FLOOR. A host's own spread
    holds while fewer than half of its flows are slow (a slow host of four slows half of all flows, but
    a third of each other host's), and the median over hosts leaves out the few that are not."""
    keys: dict[tuple[str, str], int] = {}
    group, values = [], []
    for f, r in zip(flows, ratio):
        if r > 0:
            cls = "intra" if f.a == f.b else "inter"
            for h in (f.a,) if f.a == f.b else (f.a, f.b):
                group.append(keys.setdefault((cls, h), len(keys)))
                values.append(math.log(r))
    if not keys:
        return {}
    g, v = np.asarray(group), np.asarray(values)
    middle = _group_percentiles(g, v, len(keys), 0.5)
    spread = _group_percentiles(g, np.abs(v - middle[g]), len(keys), 0.5)
    by_class: dict[str, list[float]] = {}
    for (cls, _h), k in keys.items():
        by_class.setdefault(cls, []).append(float(spread[k]))
    return {cls: max(NOISE_FLOOR, 1.4826 * float(np.median(v))) for cls, v in by_class.items()}


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    if k <= 0:
        return 1.0
    if k > n or p <= 0:
        return 0.0
    if p >= 1:
        return 1.0
    lp, lq, ln = math.log(p), math.log1p(-p), math.lgamma(n + 1)
    terms = [ln - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * lp + (n - j) * lq for j in range(k, n + 1)]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))


def _share(flags: list[bool]) -> float:
    return sum(flags) / len(flags) if flags else 0.0


@dataclass
class _Leaves:
    """Per leaf: its hosts and the indices of its cross-leaf and inside flows."""
    members: dict[str, list[str]] = field(default_factory=dict)
    cross: dict[str, list[int]] = field(default_factory=dict)  # by host
    within: dict[str, list[int]] = field(default_factory=dict)  # by leaf


class _Evidence:
    """The inter-host flows of a run with their judgement, indexed by host, subject and rail pair, and
    what is explained."""

    def __init__(self, flows: list[Flow], ratio: list[float], threshold: float, sigma: float):
        self.flows, self.ratio, self.threshold, self.sigma = flows, ratio, threshold, sigma
        self.slow = [r < threshold for r in ratio]
        self.first = [f.stage != CONFIRM for f in flows]
        self.explained = [False] * len(flows)
        self.of: dict[str, list[int]] = {}
        self.subj: dict[Subject, list[int]] = {}
        self.pair: dict[RailPair, list[int]] = {}
        for i, f in enumerate(flows):
            self.of.setdefault(f.a, []).append(i)
            self.of.setdefault(f.b, []).append(i)
            self.subj.setdefault((f.a, f.la, "tx"), []).append(i)
            self.subj.setdefault((f.b, f.lb, "rx"), []).append(i)
            self.pair.setdefault((*sorted((f.a, f.b)), f.la), []).append(i)

    def other(self, i: int, h: str) -> str:
        f = self.flows[i]
        return f.b if f.a == h else f.a

    @staticmethod
    def counterpart(f: Flow, s: Subject) -> Subject:
        """The other end's side of a flow of subject s."""
        return (f.b, f.lb, "rx") if s[2] == "tx" else (f.a, f.la, "tx")

    def flow_row(self, i: int) -> list:
        f = self.flows[i]
        return [f.a, f.b, f.la, round(self.ratio[i], 3)]

    def bad_median(self, idx: list[int]) -> bool:
        """Whether the median of these flows stays below the threshold by MARGIN_Z standard errors of a
        median of as many flows under the run's noise."""
        med = float(np.median([self.ratio[i] for i in idx]))
        return med * math.exp(MARGIN_Z * MEDIAN_SE * self.sigma / math.sqrt(len(idx))) < self.threshold

    def median(self, idx: list[int]) -> float:
        return float(np.median([self.ratio[i] for i in idx]))


class _Judgement:
    """The judgement of one set of inter-host flows, in the order of the module's docstring: what the
    confirmation stage needs (the suspects) and what is found."""

    def __init__(self, ev: _Evidence, hosts: list[str], leaf_of: Optional[dict[str, str]], lost: dict,
                 planned: Optional[Needs] = None):
        self.ev, self.hosts, self.leaf_of, self.planned = ev, hosts, leaf_of, planned
        self.found: list[dict] = []
        self.transient: list[dict] = []
        self.rails = {h: 1 + max(ev.flows[i].la for i in idx) for h, idx in ev.of.items()}
        self.leaves = self._leaves(lost) if leaf_of else None
        if self.leaves:
            self.found += self._switches()
        pre = self._suspects()
        self.probe_leaves: list[str] = []
        self.again_pairs = {key[:2] for key in (planned.pair_keys if planned is not None else self._pair_suspects())}
        if self.leaves:
            self.found += self._uplinks(pre)
        self.suspects = self._suspects()
        self.found += self._subjects()
        self.suspect_pairs = self._pair_suspects()
        self.found += self._links()
        if self.leaves:
            self._uplinks_of_links()

    # -- leaves ------------------------------------------------------------------------------------

    def _leaves(self, lost: dict) -> _Leaves:
        ev, leaf_of, out = self.ev, self.leaf_of, _Leaves()
        for i, f in enumerate(ev.flows):
            if leaf_of[f.a] != leaf_of[f.b]:
                out.cross.setdefault(f.a, []).append(i)
                out.cross.setdefault(f.b, []).append(i)
            else:
                out.within.setdefault(leaf_of[f.a], []).append(i)
        for h in self.hosts:
            if h not in lost:
                out.members.setdefault(leaf_of[h], []).append(h)
        return out

    def _switches(self) -> list[dict]:
        ev, lv = self.ev, self.leaves
        found = []
        # The clearest leaf first, its flows then explained: a healthy leaf whose hosts happened to meet
        # the slow leaf's hosts in most of their cross-leaf flows is judged on its other flows. Leaves
        # alike in evidence (two leaves only: every cross flow joins them) are named together.
        while True:
            scores = {}
            for leaf, below in lv.members.items():
                if any(f["subject"] == leaf for f in found):
                    continue
                score = self._leaf_score(below, lv.within.get(leaf, []))
                if score is not None:
                    scores[leaf] = score
            if not scores:
                return found
            best = max(scores.values())
            explained = []
            for leaf in [leaf for leaf, score in scores.items() if score == best]:
                below = lv.members[leaf]
                reached = [h for h in below if any(not ev.explained[i] for i in lv.cross.get(h, []))]
                mine = sorted({i for h in reached for i in lv.cross[h] if not ev.explained[i]})
                slow = [i for i in mine if ev.slow[i]]
                inside = lv.within.get(leaf, [])
                found.append({"kind": "switch", "subject": leaf, "hosts": below, "flows": [ev.flow_row(i) for i in slow],
                              "ratio": ev.median(slow), "hosts_slow": len(reached), "agreed": len(slow),
                              "measured": len(mine), "partners": len({ev.other(i, h) for h in reached for i in lv.cross[h]}),
                              "inside": ev.median(inside)})
                explained += mine
            for i in explained:
                ev.explained[i] = True

    def _leaf_score(self, below: list[str], inside: list[int]) -> Optional[float]:
        """The least share of slow cross-leaf flows over the hosts below a leaf (unexplained flows), where
        every one of them reaches AGREE and the flows inside the leaf are healthy; None otherwise."""
        ev = self.ev
        shares = []
        for h in below:
            mine = [i for i in self.leaves.cross.get(h, []) if not ev.explained[i]]
            if mine:
                shares.append(_share([ev.slow[i] for i in mine]))
        # A leaf of one host, or one never measured inside, cannot be told from its hosts.
        if len(shares) < 2 or not inside or _share([ev.slow[i] for i in inside]) >= 0.5 or min(shares) < AGREE:
            return None
        return min(shares)

    def _uplinks(self, suspects: set[Subject]) -> list[dict]:
        """Leaves whose cross-leaf flows are slow more often than the other leaves' in the same rounds
        (the flows of suspect rails left out: a bad NIC is not its leaf's uplink; and the host pairs
        measured again, but for their first measurement: a repeat of a slow pair is no new sample of
        how the uplinks treat flows, where a connection keeps its path for its life)."""
        ev, leaf_of = self.ev, self.leaf_of
        # (round, leaf) -> [flows, slow]; round -> [flows, slow]
        per: dict[tuple[int, str], list[int]] = {}
        total: dict[int, list[int]] = {}
        mine: dict[str, list[int]] = {}
        counted: set[int] = set()
        for i, f in enumerate(ev.flows):
            la, lb = leaf_of[f.a], leaf_of[f.b]
            if (la == lb or ev.explained[i] or (f.a, f.la, "tx") in suspects or (f.b, f.lb, "rx") in suspects
                    or (not ev.first[i] and tuple(sorted((f.a, f.b))) in self.again_pairs)):
                continue
            counted.add(i)
            t = total.setdefault(self._slot(i), [0, 0])
            t[0] += 1
            t[1] += ev.slow[i]
            for leaf in (la, lb):
                c = per.setdefault((self._slot(i), leaf), [0, 0])
                c[0] += 1
                c[1] += ev.slow[i]
                mine.setdefault(leaf, []).append(i)
        # The clearest leaf first, its cross-leaf flows then explained: a leaf that the cross rounds paired
        # with a degraded one shares some of its slow flows, and is judged on the others.
        # Leaves in doubt, before any is explained, are probed: two leaves that the cross rounds paired
        # share their slow flows, and partners below other leaves tell them apart.
        found: list[dict] = []
        doubt: set[str] = set()
        while True:
            tests = {leaf: self._uplink_test(leaf, mine.get(leaf, []), per, total) for leaf in self.leaves.members
                     if not any(f["subject"] == leaf for f in found)}
            tests = {leaf: t for leaf, t in tests.items() if t is not None}
            doubt |= {x for x, t in tests.items() if t[0] < UPLINK_SUSPECT_P}
            strong = {x: t for x, t in tests.items() if t[0] < UPLINK_P}
            if not strong:
                break
            # The largest excess of slow flows first.
            leaf = max(strong, key=lambda x: (strong[x][1] - strong[x][3]) / strong[x][2])
            tail, k, n, expected = strong[leaf]
            slow = [i for i in mine[leaf] if ev.slow[i] and not ev.explained[i]]
            found.append({"kind": "uplink", "subject": leaf, "hosts": self.leaves.members[leaf],
                          "flows": [ev.flow_row(i) for i in slow], "ratio": ev.median(slow), "agreed": k, "measured": n,
                          "share": k / n, "expected": expected / n, "p": tail})
            for h in self.leaves.members[leaf]:
                for i in self.leaves.cross.get(h, []):
                    if not ev.explained[i]:
                        ev.explained[i] = True
                        if i in counted:
                            self._uncount(i, per, total)
        self.probe_leaves = sorted(doubt - {f["subject"] for f in found})
        return found

    def _slot(self, i: int) -> int:
        """Which rounds share a chance of a slow flow: each first round its own (within or across leaves,
        loaded alike), the light confirmation rounds one together (-1): a leaf probed alone in a round
        is compared with the other leaves probed in the others."""
        return self.ev.flows[i].round if self.ev.first[i] else -1

    def _uncount(self, i: int, per: dict, total: dict) -> None:
        f, ev = self.ev.flows[i], self.ev
        for leaf in {self.leaf_of[f.a], self.leaf_of[f.b]}:
            c = per[(self._slot(i), leaf)]
            c[0] -= 1
            c[1] -= ev.slow[i]
        total[self._slot(i)][0] -= 1
        total[self._slot(i)][1] -= ev.slow[i]

    def _uplink_test(self, leaf: str, mine: list[int], per: dict, total: dict) -> Optional[tuple[float, int, int, float]]:
        """(the chance of as many slow cross-leaf flows, slow, flows, expected slow) of a leaf whose share
        of slow cross-leaf flows exceeds its rounds' share elsewhere by UPLINK_EXCESS, and does so still
        without its host of most slow flows (a worn host is not its leaf's uplink, which slows every
        host's flows alike); None otherwise. The chance is the larger of the two."""
        ev = self.ev
        idx = [i for i in mine if not ev.explained[i]]
        k, n, expected = self._tally(leaf, idx, per, total)
        if not n or (k - expected) / n < UPLINK_EXCESS:
            return None
        slow: dict[str, int] = {}
        for i in idx:
            if ev.slow[i]:
                for h in (ev.flows[i].a, ev.flows[i].b):
                    if self.leaf_of[h] == leaf:
                        slow[h] = slow.get(h, 0) + 1
        worst = max(slow, key=slow.__getitem__)
        k2, n2, e2 = self._tally(leaf, [i for i in idx if worst not in (ev.flows[i].a, ev.flows[i].b)], per, total)
        if not n2 or (k2 - e2) / n2 < UPLINK_EXCESS:
            return None
        return max(binomial_tail(k, n, expected / n), binomial_tail(k2, n2, e2 / n2)), k, n, expected

    def _tally(self, leaf: str, idx: list[int], per: dict, total: dict) -> tuple[int, int, float]:
        """(slow, flows, expected slow) of these cross-leaf flows of a leaf, each round's chance of a slow
        flow taken from its cross-leaf flows outside the leaf (one slow and one healthy added, so that a
        round of no slow flow still allows some); rounds with too few such flows left out."""
        ev = self.ev
        by_round: dict[int, list[int]] = {}
        for i in idx:
            c = by_round.setdefault(self._slot(i), [0, 0])
            c[0] += 1
            c[1] += ev.slow[i]
        n = k = 0
        expected = 0.0
        few = [0, 0, 0, 0]  # the rounds of too few flows elsewhere, pooled: flows, slow; elsewhere, slow
        for rnd, (nl, kl) in by_round.items():
            n_all, k_all = total[rnd]
            n_leaf, k_leaf = per[(rnd, leaf)]
            n_rest, k_rest = n_all - n_leaf, k_all - k_leaf
            if n_rest < BASELINE_FLOWS:
                few = [few[0] + nl, few[1] + kl, few[2] + n_rest, few[3] + k_rest]
                continue
            n += nl
            k += kl
            expected += nl * (k_rest + 1) / (n_rest + 2)
        # A small cluster's rounds each have few flows outside a leaf, and are loaded alike: together
        # they say what a round's chance is. Still too few: no other leaf says it.
        if few[2] >= POOLED_BASELINE_FLOWS:
            n += few[0]
            k += few[1]
            expected += few[0] * (few[3] + 1) / (few[2] + 2)
        return k, n, expected

    # -- rails of hosts, each way ---------------------------------------------------------------------

    def _first(self, s: Subject, suspects: Optional[set]) -> list[int]:
        """The first rounds' unexplained flows that judge s: those with partners whose side is no
        suspect where two partners or more are, else all."""
        ev = self.ev
        idx = [i for i in ev.subj.get(s, ()) if ev.first[i] and not ev.explained[i]]
        if suspects is None:
            return idx
        clean = [i for i in idx if ev.counterpart(ev.flows[i], s) not in suspects]
        return clean if len({ev.other(i, s[0]) for i in clean}) >= 2 else idx

    def _agrees(self, s: Subject, suspects: Optional[set]) -> bool:
        ev = self.ev
        idx = self._first(s, suspects)
        partners = {ev.other(i, s[0]) for i in idx}
        agreed = {ev.other(i, s[0]) for i in idx if ev.slow[i]}
        return len(partners) >= 2 and len(agreed) >= AGREE * len(partners)

    def _suspects(self) -> set[Subject]:
        ev = self.ev
        slow = {s for s, idx in ev.subj.items() if any(ev.slow[i] and ev.first[i] for i in idx)}
        raw = {s for s in slow if self._agrees(s, None)}
        return {s for s in raw if self._agrees(s, raw)}

    def _decide(self, s: Subject) -> tuple[bool, list[int]]:
        """Whether suspect s is bad, and the flows that say so: the confirmation's light rounds where
        they measured it twice or more, else the first rounds (too few healthy partners were left)."""
        ev = self.ev
        # Not the flows of host pairs measured again as links: a slow link is not its end's rail.
        again = [i for i in ev.subj.get(s, ()) if not ev.first[i] and not ev.explained[i]
                 and ev.counterpart(ev.flows[i], s) not in self.suspects
                 and tuple(sorted((ev.flows[i].a, ev.flows[i].b))) not in self.again_pairs]
        if len(again) >= 2:
            return ev.bad_median(again), again
        # Too few healthy partners were left to measure it again (a small cluster): the first rounds'
        # flows, which must agree and stay below the threshold by the same margin; only those whose
        # other end is no suspect, as a suspect receiver (or sender) explains a slow flow as well as s.
        first = [i for i in self._first(s, None) if ev.counterpart(ev.flows[i], s) not in self.suspects]
        agrees = s in self.suspects and len(first) >= 2 and ev.bad_median(first)
        return agrees and all(ev.slow[i] for i in again), first + again

    def _judged(self) -> set[Subject]:
        """The suspects the confirmation stage measured again: those of the first rounds alone (a suspect
        only once the confirmation's flows moved the typical flow was not measured again)."""
        return set(self.planned.subjects) if self.planned is not None else self.suspects

    def _subjects(self) -> list[dict]:
        ev = self.ev
        bad: dict[str, dict[int, dict[str, list[int]]]] = {}
        for s in sorted(self._judged()):
            is_bad, idx = self._decide(s)
            if is_bad:
                bad.setdefault(s[0], {}).setdefault(s[1], {})[s[2]] = idx
            elif idx:
                self.transient.append(self._transient(f"{s[0]}:{s[1]} {s[2]}", [s[0]], idx))
        found = []
        for h, rails in bad.items():
            for rail, ways in rails.items():
                for way in ways:
                    for i in ev.subj[(h, rail, way)]:
                        ev.explained[i] = True
            if len(rails) == self.rails[h]:
                found.append(self._finding("host", h, h, [i for ways in rails.values() for idx in ways.values()
                                                          for i in idx], rails=self.rails[h]))
                continue
            for rail in sorted(rails):
                ways = rails[rail]
                kind = "rail" if len(ways) == 2 else next(iter(ways))
                found.append(self._finding(kind, f"{h}:{rail}", h, [i for idx in ways.values() for i in idx], rail=rail))
        return found

    def _finding(self, kind: str, subject: str, host: str, idx: list[int], **more) -> dict:
        ev = self.ev
        slow = [i for i in idx if ev.slow[i]] or idx
        return {"kind": kind, "subject": subject, "hosts": [host], **more, "flows": [ev.flow_row(i) for i in slow],
                "ratio": ev.median(slow), "agreed": sum(ev.slow[i] for i in idx), "measured": len(idx),
                "partners": len({ev.other(i, host) for i in idx})}

    def _transient(self, subject: str, hosts: list[str], idx: list[int]) -> dict:
        ev = self.ev
        again = [i for i in idx if not ev.first[i]]
        return {"kind": "transient", "subject": subject, "hosts": hosts, "flows": [ev.flow_row(i) for i in idx if ev.slow[i]],
                "ratio": ev.median(again or idx), "agreed": sum(ev.slow[i] for i in again), "measured": len(again)}

    # -- host pairs -----------------------------------------------------------------------------------

    def _pair_suspects(self) -> set[RailPair]:
        """Rails of host pairs slow both ways (AGREE of two measurements or more) in the first rounds."""
        ev = self.ev
        out = set()
        for key, idx in ev.pair.items():
            first = [i for i in idx if ev.first[i] and not ev.explained[i]]
            if len(first) >= 2 and _share([ev.slow[i] for i in first]) >= AGREE:
                out.add(key)
        return out

    def _links(self) -> list[dict]:
        ev = self.ev
        bad: dict[tuple[str, str], dict[int, list[int]]] = {}
        planned = set(self.planned.pair_keys) if self.planned is not None else set()
        for key in sorted(self.suspect_pairs | planned):
            again = [i for i in ev.pair[key] if not ev.first[i] and not ev.explained[i]]
            if not again:
                continue  # named only where measured again
            # Slow both ways: a path between two hosts carries both; one way alone is an end's rx or tx,
            # or collisions, which one way of the light rounds still meets now and then.
            ways = [[i for i in again if ev.flows[i].a == end] for end in key[:2]]
            if all(len(w) >= 2 for w in ways):
                slow_both = all(ev.bad_median(w) for w in ways)
            else:
                slow_both = all(ways) and all(ev.slow[i] for i in again)
            if slow_both:
                bad.setdefault(key[:2], {})[key[2]] = again
            else:
                self.transient.append(self._transient(f"{key[0]}-{key[1]}:{key[2]}", list(key[:2]), again))
        found = []
        for (a, b), rails in bad.items():
            idx = [i for again in rails.values() for i in again]
            slow = [i for i in idx if ev.slow[i]] or idx
            found.append({"kind": "link", "subject": f"{a}-{b}", "hosts": [a, b], "rails_slow": sorted(rails),
                          "flows": [ev.flow_row(i) for i in slow], "ratio": ev.median(slow),
                          "agreed": sum(ev.slow[i] for i in idx), "measured": len(idx),
                          "others": {h: len({ev.other(i, h) for i in ev.of[h]} - {a, b}) for h in (a, b)}})
        return found

    def _uplinks_of_links(self) -> None:
        """Links through one leaf's uplinks (UPLINK_LINKS or more, from two of its hosts or more) as the
        leaf's uplink: the leaf of most such links first, its links then gone."""
        while True:
            through: dict[str, list[tuple[dict, str]]] = {}
            for f in self.found:
                if f["kind"] == "link":
                    a, b = f["hosts"]
                    if self.leaf_of[a] != self.leaf_of[b]:
                        for own in (a, b):
                            through.setdefault(self.leaf_of[own], []).append((f, own))
            candidates = [leaf for leaf in sorted(through) if len(through[leaf]) >= UPLINK_LINKS
                          and len({own for _f, own in through[leaf]}) >= 2]
            if not candidates:
                return
            leaf = max(candidates, key=lambda x: len(through[x]))
            links = [f for f, _own in through[leaf]]
            flows = [row for f in links for row in f["flows"]]
            self.found = [f for f in self.found if not any(f is x for x in links)]
            self.found.append({"kind": "uplink", "subject": leaf, "hosts": self.leaves.members[leaf], "flows": flows,
                               "ratio": float(np.median([row[3] for row in flows])), "links": len(links),
                               "from": len({own for _f, own in through[leaf]}),
                               "agreed": sum(f["agreed"] for f in links), "measured": sum(f["measured"] for f in links)})

    def needs(self) -> tuple[set[str], list[RailPair], set[str]]:
        """(the hosts of suspect subjects, the suspect rails of host pairs where neither end is a
        suspect on that rail (its own confirmation explains them), the hosts below leaves whose switch is
        named or whose uplink is a suspect), for the confirmation stage."""
        hosts = {s[0] for s in self.suspects}
        rails = {s[:2] for s in self.suspects}
        pairs = sorted(key for key in self.suspect_pairs if (key[0], key[2]) not in rails and (key[1], key[2]) not in rails)
        # A named leaf's hosts are probed too: two leaves that the cross rounds paired look alike, and
        # partners below other leaves tell them apart.
        leaves = self.probe_leaves + [f["subject"] for f in self.found if f["kind"] in ("switch", "uplink")]
        probes = {h for leaf in leaves for h in self.leaves.members[leaf]} if self.leaves else set()
        return hosts, pairs, probes


def attribute(flows: list[Flow], ratio: list[float], hosts: list[str], threshold: float,
              leaf_of: Optional[dict[str, str]] = None, lost: Optional[dict[str, str]] = None,
              nics: Optional[dict[tuple[str, int], str]] = None, sigma: Optional[float] = None,
              planned: Optional[Needs] = None) -> list[dict]:
    """The findings of a host-level run: `hosts` in their order, `lost` {host: why}, `nics` {(host,
    local rank): NIC name} where the topology snapshot knows it, `sigma` the inter-host noise (noise()),
    `planned` what the confirmation stage was given to measure (confirmation_needs of the first rounds;
    None: the suspects of these flows)."""
    lost = lost or {}
    found = [{"kind": "lost", "subject": h, "hosts": [h], "why": why} for h, why in lost.items()]
    j = _judge(flows, ratio, hosts, threshold, leaf_of, lost, sigma, planned)
    for f in j.found:
        if "rail" in f and f["kind"] in ("rail", "rx", "tx"):
            f["nic"] = (nics or {}).get((f["hosts"][0], f["rail"]))
    found += j.found + j.transient
    if len(hosts) > 1:
        # A host that met no other (an idle one of an odd count, one not reached before a failure)
        # was not shown good.
        found += [{"kind": "untested", "subject": h, "hosts": [h]} for h in dict.fromkeys(hosts)
                  if h not in j.ev.of and h not in lost]
    keep = [i for i, f in enumerate(flows) if f.a not in lost and f.b not in lost and f.a == f.b]
    found += _intra([flows[i] for i in keep], [ratio[i] for i in keep], threshold)
    order = {h: k for k, h in enumerate(hosts)}
    found.sort(key=lambda f: (ORDER.index(f["kind"]), min(order[h] for h in f["hosts"]), f["subject"]))
    return found


def _judge(flows, ratio, hosts, threshold, leaf_of, lost, sigma, planned=None) -> _Judgement:
    inter = [i for i, f in enumerate(flows) if f.a != f.b and f.a not in lost and f.b not in lost]
    if sigma is None:
        sigma = noise([flows[i] for i in inter], [ratio[i] for i in inter]).get("inter", NOISE_FLOOR)
    ev = _Evidence([flows[i] for i in inter], [ratio[i] for i in inter], threshold, sigma)
    return _Judgement(ev, hosts, leaf_of, lost, planned)


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
                          "ratio": f["ratio"], "agreed": len(f["pairs"]), "measured": size - 1})
    return found


@dataclass(frozen=True)
class Needs:
    """What the confirmation stage measures: each suspect host against CONFIRMATIONS trusted partners
    it has not met, the host pairs of suspect rails CONFIRMATIONS times again, each host below a leaf
    whose uplink is a suspect once against a trusted host of another leaf; the trusted hosts, and those
    trusted inside their own leaf alone; and the suspects themselves, which the final judgement decides."""
    partners: dict[str, int]
    again: list[tuple[str, str]]
    across: set[str]
    trusted: set[str]
    shady: frozenset = frozenset()  # below a doubtful leaf: partners inside it alone
    subjects: frozenset = frozenset()
    pair_keys: frozenset = frozenset()


def confirmation_needs(flows: list[Flow], ratio: list[float], hosts: list[str], threshold: float,
                       leaf_of: Optional[dict[str, str]] = None, lost: Optional[dict[str, str]] = None) -> Needs:
    """What the confirmation stage measures after the first rounds' flows."""
    lost = lost or {}
    j = _judge(flows, ratio, hosts, threshold, leaf_of, lost, None)
    suspects, pairs, probes = j.needs()
    partners = {h: CONFIRMATIONS for h in suspects}
    partners.update({h: 1 for h in probes if h not in partners})
    # Trusted partners: no suspect, in no suspect pair; below a leaf whose switch or uplink is named or
    # probed only for hosts of that leaf (a partner's own fault would be read as the suspect's).
    doubtful = {h for f in j.found if f["kind"] in ("switch", "uplink") for h in f["hosts"]} | probes
    inter = {h for f in flows if f.a != f.b for h in (f.a, f.b)}
    shady = doubtful - {h for p in pairs for h in p[:2]} - set(lost)
    trusted = inter - suspects - {h for p in pairs for h in p[:2]} - doubtful - set(lost)
    hosts_again = sorted({key[:2] for key in pairs})
    again = [p for p in hosts_again for _ in range(CONFIRMATIONS)]
    return Needs(partners, again, probes - suspects, trusted, frozenset(shady), frozenset(j.suspects),
                 frozenset(pairs))
