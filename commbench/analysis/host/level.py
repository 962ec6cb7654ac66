"""A host-level `links` run as rounds and judgements, whoever measures the flows: `commbench links`
on real ranks (run/links.py) or `benchmarks/links_at_scale.py` on a model of a cluster. Every rank
computes the first rounds alike from the seed; the confirmation rounds follow from what the first
ones measured (rank 0 decides them and tells the others)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Optional

from ...results.findings import verdicts
from .schedule import HostPair, confirmation_rounds, host_ranks, inter_rounds, intra_rounds, rail_flows
from .verdicts import Flow, Needs, attribute, confirmation_needs, noise, ratios

STAGES = {"intra": "rank pairs inside each host", "inter": "rail-aligned flows of host matchings",
          "confirm": "suspects against healthy partners"}


@dataclass(frozen=True)
class Round:
    """Rank pairs measured at once, and the host pairs they stand for (none inside hosts). Between
    hosts (`both`) the bandwidth of each pair is measured both ways, one way after the other."""
    stage: str
    pairs: list[tuple[int, int]]
    hosts: list[HostPair] = field(default_factory=list)

    @property
    def both(self) -> bool:
        return bool(self.hosts)


@dataclass(frozen=True)
class Layout:
    """Where the ranks are: host by rank, each rank's local index, and the leaf of each host."""
    hosts: list[str]
    leaf_of: Optional[dict[str, str]] = None

    @cached_property
    def groups(self) -> dict[str, list[int]]:
        return host_ranks(self.hosts)

    def local(self) -> list[int]:
        out = [0] * len(self.hosts)
        for ranks in self.groups.values():
            for i, r in enumerate(ranks):
                out[r] = i
        return out

    def flow(self, stage: str, a: int, b: int, bandwidth_gbps: Optional[float], latency_us: Optional[float],
             local: list[int], round_no: int = 0) -> Flow:
        """Rank a sending to rank b."""
        return Flow(stage, self.hosts[a], self.hosts[b], local[a], local[b], bandwidth_gbps, latency_us, round_no)

    def names(self) -> list[str]:
        return list(self.groups)


def first_rounds(layout: Layout, k: Optional[int], seed: int, intra: bool = True) -> list[Round]:
    """Inside every host (unless not `intra`), then K matchings of hosts (None: every host pair)."""
    groups = layout.groups
    rounds = [Round("intra", pairs) for pairs in intra_rounds(groups)] if intra else []
    for pairs in inter_rounds(list(groups), k, seed, layout.leaf_of):
        rounds.append(Round("inter", rail_flows(groups, pairs), pairs))
    return rounds


def judge(layout: Layout, flows: list[Flow], threshold: float, judged, lost: Optional[dict[str, str]] = None,
          nics: Optional[dict] = None, planned: Optional[Needs] = None) -> dict:
    """The findings and one verdict per host, with the typical flows they were judged against and the
    run's noise (the spread of its flows, per class). `planned`: what the confirmation stage was given
    (plan() of the first rounds, drawn again from them where not given)."""
    ratio, typ = ratios(flows, judged)
    spread = noise(flows, ratio)
    if planned is None:
        planned = plan(layout, [f for f in flows if f.stage != "confirm"], threshold, judged, lost)
    found = attribute(flows, ratio, layout.names(), threshold, layout.leaf_of, lost, nics, spread.get("inter"), planned)
    return {"typical": typ, "noise": spread, "findings": found, "verdicts": verdicts(found, layout.names()),
            "ratio": ratio}


def plan(layout: Layout, flows: list[Flow], threshold: float, judged, lost: Optional[dict[str, str]] = None) -> Needs:
    """What the confirmation stage measures after the first rounds' flows."""
    return confirmation_needs(flows, ratios(flows, judged)[0], layout.names(), threshold, layout.leaf_of, lost)


def confirm_rounds(layout: Layout, flows: list[Flow], seed: int, threshold: float, judged,
                   lost: Optional[dict[str, str]] = None, needs: Optional[Needs] = None) -> list[Round]:
    """The confirmation stage after the first rounds' flows: each suspect against trusted partners it
    has not met, each suspect host pair again, each host below a doubtful leaf across leaves (`needs`:
    plan() of these flows, drawn here where not given)."""
    names = layout.names()
    needs = needs or plan(layout, flows, threshold, judged, lost)
    met: dict[str, set] = {}
    for f in flows:
        if f.a != f.b:
            met.setdefault(f.a, set()).add(f.b)
            met.setdefault(f.b, set()).add(f.a)
    groups = layout.groups
    return [Round("confirm", rail_flows(groups, pairs), pairs)
            for pairs in confirmation_rounds(needs.partners, needs.again, sorted(needs.trusted), met, names, seed,
                                             layout.leaf_of, frozenset(needs.across), needs.shady)]
