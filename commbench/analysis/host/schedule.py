"""Which flows `commbench links --level host` measures, round by round, so that a run's time depends
on its number of rounds and not on its number of hosts.

A host is the unit of repair; local rank i of every host talks to other hosts through NIC i (rail i).
Three stages, each a list of rounds of disjoint flows measured all at once:
- intra: every host's own rank pairs, all hosts together, in circle-method rounds inside each host;
- inter: K rounds, each a matching of hosts (drawn from a seed, so a rerun repeats it) in which local
  rank i of host A meets local rank i of host B on every rail i both have. Without a topology the K
  rounds are K rounds of the circle method over a seeded order of the hosts, so every host meets K
  different partners (K - 1 where an odd count leaves it idle once). With leaves, half the rounds pair
  hosts within their leaf and half across leaves, so that a leaf's uplinks can be told from its hosts;
- confirm: each suspect retested against partners judged healthy and never met before, and each
  suspect host pair measured again, in rounds light enough that their flows rarely collide
  (confirmation_rounds).
Between hosts each flow is measured both ways (Round.both): every host sends and receives on every
rail, so a fault of one direction (an RX lane, one fibre of a pair) shows.
Pure functions of host names, a seed and the evidence: `benchmarks/links_at_scale.py` drives them on a
model of thousands of hosts, `commbench links` on real ranks."""

from __future__ import annotations

import random
from typing import Optional

from ..links import circle_round, circle_rounds

HostPair = tuple[str, str]
# Arrangements tried per cross-leaf round for the one that repeats fewest pairs of earlier rounds.
CROSS_TRIES = 8
# A confirmation round keeps one host in LIGHT busy, LIGHT_MIN pairs at least (light_pairs).
LIGHT = 8
LIGHT_MIN = 4


def host_ranks(hosts: list[str]) -> dict[str, list[int]]:
    """{host: its ranks in rank order}: local rank i is a host's i-th rank; hosts in the order of their
    first rank."""
    groups: dict[str, list[int]] = {}
    for rank, host in enumerate(hosts):
        groups.setdefault(host, []).append(rank)
    return groups


def default_rounds(n_hosts: int, leaves: bool) -> int:
    """Every pair below 4 hosts; from 4 on, every host at least 3 different partners: 3 circle rounds
    (4 for an odd count, where each host sits out one round of all); with leaves 2 within and 2 across."""
    if n_hosts < 4:
        return circle_rounds(n_hosts)
    return 4 if leaves else 3 + n_hosts % 2


def intra_rounds(groups: dict[str, list[int]]) -> list[list[tuple[int, int]]]:
    """Rank pairs inside every host, all hosts at once: round r holds every host's round r."""
    per_host = [[[(ranks[a], ranks[b]) for a, b in rnd] for rnd in (circle_round(len(ranks), r)
                 for r in range(circle_rounds(len(ranks))))] for ranks in groups.values() if len(ranks) > 1]
    count = max((len(rounds) for rounds in per_host), default=0)
    return [sorted(pair for rounds in per_host if r < len(rounds) for pair in rounds[r]) for r in range(count)]


def inter_rounds(hosts: list[str], k: Optional[int], seed: int,
                 leaf_of: Optional[dict[str, str]] = None) -> list[list[HostPair]]:
    """K rounds of host matchings (None: every host pair, in N - 1 rounds or N for odd N), each pair in
    the order of `hosts`. With `leaf_of`, half the rounds (the lesser half) within leaves, the rest
    across them."""
    rng = random.Random(seed)
    n = len(hosts)
    k = circle_rounds(n) if k is None else k
    leaves = _leaves(hosts, leaf_of)
    if k >= circle_rounds(n) or len(leaves) < 2:
        return _circle_pick(hosts, k, rng, hosts)
    within = [_circle_pick(members, k // 2, rng, hosts) for members in leaves.values()]
    # More rounds than a leaf has pairs for leave it idle; a round with no pair at all is not run.
    rounds = [rnd for rnd in ([pair for picked in within if r < len(picked) for pair in picked[r]]
                              for r in range(k // 2)) if rnd]
    rounds = [sorted(rnd) for rnd in rounds]
    met = {pair for rnd in rounds for pair in rnd}
    for _ in range(k - k // 2):
        # The arrangement with the fewest pairs met before, then the most pairs (a leaf holding more
        # than half of the hosts leaves some idle); a round of no pair is not run.
        rnd = min((_cross(leaves, rng, hosts) for _ in range(CROSS_TRIES)),
                  key=lambda rnd: (len(met.intersection(rnd)), -len(rnd)))
        if rnd:
            met.update(rnd)
            rounds.append(rnd)
    return rounds


def _leaves(hosts: list[str], leaf_of: Optional[dict[str, str]]) -> dict[str, list[str]]:
    if leaf_of is None:
        return {"": list(hosts)}
    leaves: dict[str, list[str]] = {}
    for h in hosts:
        leaves.setdefault(leaf_of[h], []).append(h)
    return leaves


def _ordered(a: str, b: str, order: dict[str, int]) -> HostPair:
    return (a, b) if order[a] < order[b] else (b, a)


def _circle_pick(members: list[str], k: int, rng: random.Random, hosts: list[str]) -> list[list[HostPair]]:
    """k of the circle method's rounds over a seeded order of `members` (all of them where k is as many
    or more): distinct rounds of one circle never repeat a pair."""
    if len(members) < 2:
        return []
    order = {h: i for i, h in enumerate(hosts)}
    shuffled = list(members)
    rng.shuffle(shuffled)
    total = circle_rounds(len(members))
    picked = range(total) if k >= total else sorted(rng.sample(range(total), k))
    return [sorted(_ordered(shuffled[a], shuffled[b], order) for a, b in circle_round(len(members), r)) for r in picked]


def _cross(leaves: dict[str, list[str]], rng: random.Random, hosts: list[str]) -> list[HostPair]:
    """One matching across leaves: the hosts laid out leaf after leaf (leaves and hosts in a seeded
    order), the i-th of the first half paired with the i-th of the second. Where no leaf holds more
    than half of the hosts, the two ends of every pair lie in different leaves; a pair of one leaf
    (a leaf with more than half) sits the round out."""
    order = {h: i for i, h in enumerate(hosts)}
    names = list(leaves)
    rng.shuffle(names)
    line: list[tuple[str, str]] = []
    for leaf in names:
        members = list(leaves[leaf])
        rng.shuffle(members)
        line += [(leaf, h) for h in members]
    half = len(line) // 2
    return sorted(_ordered(line[i][1], line[i + half][1], order) for i in range(half) if line[i][0] != line[i + half][0])


def rail_flows(groups: dict[str, list[int]], pairs: list[HostPair]) -> list[tuple[int, int]]:
    """The rank pairs of host pairs: local rank i of one with local rank i of the other, on every rail
    both hosts have."""
    return [(groups[a][i], groups[b][i]) for a, b in pairs for i in range(min(len(groups[a]), len(groups[b])))]


def confirmation_rounds(needs: dict[str, int], again: list[HostPair], trusted: list[str], met: dict[str, set],
                        hosts: list[str], seed: int, leaf_of: Optional[dict[str, str]] = None,
                        across: frozenset = frozenset(), shady: frozenset = frozenset()) -> list[list[HostPair]]:
    """Rounds that give each suspect host `needs[host]` partners from `trusted` that it has not met
    (`met`), and measure each pair of `again` once per time it is listed. With leaves, a suspect's new
    partners alternate between its own leaf and other leaves where both have trusted hosts, so a host's
    fault is told from its leaf's; a host of `across` takes its first from another leaf (a leaf's uplink
    is probed). Hosts of `shady` (below a leaf whose switch or uplink is in doubt) are partners inside
    their leaf alone, and a suspect among them meets partners inside its leaf alone. A round holds at
    most light_pairs(hosts) pairs. Stops where no further pair can be arranged (too few trusted hosts):
    the attribution then works from what there is."""
    rng = random.Random(f"confirm {seed}")
    order = {h: i for i, h in enumerate(hosts)}
    pool = sorted(set(trusted) | shady, key=order.__getitem__)
    rng.shuffle(pool)
    need = {h: n for h, n in needs.items() if n > 0}
    given = {h: 0 for h in need}
    met = {h: set(met.get(h, ())) for h in need}
    todo = list(again)
    cap = light_pairs(len(hosts))
    rounds, start = [], 0
    while need or todo:
        busy: set[str] = set()
        rnd = []
        for pair in list(todo):
            if len(rnd) < cap and not busy.intersection(pair):
                rnd.append(_ordered(*pair, order))
                busy.update(pair)
                todo.remove(pair)
        for s in sorted(need, key=order.__getitem__):
            if s in busy or len(rnd) >= cap:
                continue
            inside = s in shady and s not in across
            want_own = leaf_of is not None and (inside or (given[s] % 2 == 0) != (s in across))
            partner = _partner(s, pool, start, busy, met[s], leaf_of, want_own, shady, inside)
            if partner is None:
                continue
            start = (pool.index(partner) + 1) % len(pool)
            rnd.append(_ordered(s, partner, order))
            busy.update((s, partner))
            met[s].add(partner)
            given[s] += 1
            if given[s] >= need[s]:
                del need[s]
        if not rnd:
            break
        rounds.append(sorted(rnd))
    return rounds


def light_pairs(n_hosts: int) -> int:
    """The most host pairs of a confirmation round: one host in LIGHT busy (at least LIGHT_MIN pairs),
    so that the round's flows rarely share a spine uplink (ECMP collisions grow with a round's load)."""
    return max(LIGHT_MIN, n_hosts // (2 * LIGHT))


def _partner(s: str, pool: list[str], start: int, busy: set, met: set, leaf_of, want_own: bool, shady: frozenset,
             inside: bool) -> Optional[str]:
    """The next free partner for suspect s from `start` around the pool: first of the leaf wanted, then
    any (but where s must stay `inside` its leaf); a shady host only for a suspect of its own leaf."""
    n = len(pool)
    if leaf_of is None:
        fits = [lambda t: True]
    else:
        fits = [lambda t: (leaf_of[t] == leaf_of[s]) == want_own] + ([] if inside else [lambda t: True])
    for fit in fits:
        for i in range(n):
            t = pool[(start + i) % n]
            if (t != s and t not in busy and t not in met and fit(t)
                    and (t not in shady or (leaf_of is not None and leaf_of[t] == leaf_of[s]))):
                return t
    return None
