"""Slurm's topology.conf (the tree plugin's syntax), read for `commbench links --topology FILE`: which
leaf switch each host sits under. Two hosts under one leaf talk through that switch alone; two under
different leaves cross both leaves' uplinks, so the leaf a host sits under decides which flows share
(and can be slowed by) which uplinks, and a slow pair can be put down to a leaf rather than a host.

The file has one switch a line: `SwitchName=NAME` with `Nodes=HOSTLIST` (a leaf: hosts hang off it)
and/or `Switches=HOSTLIST` (the switches below it), and optionally `LinkSpeed=N`. Keys are
case-insensitive as in Slurm, `#` starts a comment and a trailing backslash continues a line. Host
lists are Slurm's expressions (`node[001-032]`, `rack[1-2]-gpu[01-02]`), expanded here rather than by
a hostlist library, which would bring its licence along.

Every fault is one CommbenchError; where a line is at fault its message starts with `FILE:LINE: `."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Optional

from ..errors import CommbenchError

# More names than any cluster has hosts: a typo such as node[1-100000000] is refused before it is
# expanded, not after it has filled the memory.
MAX_HOSTS = 1_000_000
# A bracket's numbers: far beyond any host count, well below int()'s 4,300 digits.
MAX_DIGITS = 64
# A topology file: a million host names of 64 characters.
MAX_TOPOLOGY_BYTES = 64 << 20
# How many unmatched host names an error lists; the rest are counted.
SHOWN = 5

KEYS = {"switchname": "SwitchName", "nodes": "Nodes", "switches": "Switches", "linkspeed": "LinkSpeed"}
_NUMBER = re.compile(r"[0-9]+")
_GROUP = re.compile(r"(\[[^\]]*\])")
# Characters no host or switch name holds: a NUL would end the name in C, and Slurm reads none of them.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# The most characters of one expression, token or name an error line quotes: an expression of a
# million names quoted whole made a line of 10 MB.
QUOTED = 60


def _q(text: str) -> str:
    """text quoted for an error line, cut to QUOTED characters."""
    return repr(text if len(text) <= QUOTED else text[:QUOTED - 3] + "...")


# ---- host lists -------------------------------------------------------------------------------------

def _split_top(expr: str) -> list[str]:
    """The expression's items: split at the commas outside brackets, the brackets checked on the way."""
    items, start, depth = [], 0, 0
    for i, ch in enumerate(expr):
        if ch == "[":
            if depth:
                raise CommbenchError(f"hostlist {_q(expr)}: nested brackets at position {i + 1}")
            depth = 1
        elif ch == "]":
            if not depth:
                raise CommbenchError(f"hostlist {_q(expr)}: unbalanced ']' at position {i + 1}")
            depth = 0
        elif ch == "," and not depth:
            items.append(expr[start:i])
            start = i + 1
    if depth:
        raise CommbenchError(f"hostlist {_q(expr)}: unbalanced '[' (no closing ']')")
    items.append(expr[start:])
    return items


def _group(expr: str, body: str) -> list[tuple[int, int, int]]:
    """A bracket's contents as (low, high, width) ranges; a single number is a range of one. The width
    is the low bound's, leading zeros and all, as Slurm pads: [001-032] gives 001, [8-12] gives 8."""
    ranges = []
    for part in body.split(","):
        lo, sep, hi = part.partition("-")
        if not part:
            raise CommbenchError(f"hostlist {_q(expr)}: empty item in {_q('[' + body + ']')}")
        if not _NUMBER.fullmatch(lo) or (sep and not _NUMBER.fullmatch(hi)):
            raise CommbenchError(f"hostlist {_q(expr)}: {_q(part)} in {_q('[' + body + ']')} is not a number or a range N-M of numbers")
        if max(len(lo), len(hi)) > MAX_DIGITS:
            raise CommbenchError(f"hostlist {_q(expr)}: a number of more than {MAX_DIGITS} digits names no host")
        low, high = int(lo), int(hi) if sep else int(lo)
        if high < low:
            raise CommbenchError(f"hostlist {_q(expr)}: the range {_q(part)} ends below its start")
        ranges.append((low, high, len(lo)))
    return ranges


def expand_hostlist(expr: str) -> list[str]:
    """The host names of a Slurm hostlist expression, in Slurm's order: items left to right, and where
    an item has several bracket groups, their cartesian product with the left-most varying slowest.
    `node[001-003]` -> node001, node002, node003; `a,b[1-2]` -> a, b1, b2. Duplicates are kept."""
    text = expr.strip()
    if not text:
        raise CommbenchError(f"hostlist {_q(expr)}: empty; it names no host")
    parsed = []  # per item: literal text and bracket groups, alternating (text first and last)
    total = 0
    for item in _split_top(text):
        if not item:
            raise CommbenchError(f"hostlist {_q(expr)}: empty item (a comma at the start, at the end or twice)")
        if any(ch.isspace() for ch in item):
            raise CommbenchError(f"hostlist {_q(expr)}: {_q(item)} holds a space; host names have none")
        pieces = _GROUP.split(item)
        groups = [_group(expr, piece[1:-1]) for piece in pieces[1::2]]
        count = 1
        for ranges in groups:
            count *= sum(high - low + 1 for low, high, _ in ranges)
        total += count
        # Counted before anything is expanded, so a huge range costs nothing but this line.
        if total > MAX_HOSTS:
            raise CommbenchError(f"hostlist {_q(expr)}: expands to more than {MAX_HOSTS:,} names")
        parsed.append((pieces[0::2], groups))
    names: list[str] = []
    for texts, groups in parsed:
        choices = [[str(n).zfill(width) for low, high, width in ranges for n in range(low, high + 1)] for ranges in groups]
        for combo in itertools.product(*choices):
            names.append("".join(t + c for t, c in zip(texts, combo)) + texts[-1])
    return names


# ---- the topology -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Topology:
    """Leaf switches and their hosts (file order), the switch tree above them, and where it came from."""

    leaves: dict[str, tuple[str, ...]]
    parents: dict[str, str] = field(default_factory=dict)
    source: str = "(model)"

    @cached_property
    def leaf_of(self) -> dict[str, str]:
        """{host: the leaf switch it sits under}."""
        return {host: leaf for leaf, hosts in self.leaves.items() for host in hosts}

    def check_hosts(self, hosts: Iterable[str]) -> None:
        """Raise CommbenchError when any of `hosts` is under no leaf switch: a run's hosts that the file
        does not know would be judged against a tree that is not theirs."""
        known = self.leaf_of
        missing = list(dict.fromkeys(h for h in hosts if h not in known))
        if not missing:
            return
        shown = ", ".join(missing[:SHOWN])
        more = f" (and {len(missing) - SHOWN} more)" if len(missing) > SHOWN else ""
        verb = "is" if len(missing) == 1 else "are"
        raise CommbenchError(f"the hosts do not match the topology {self.source}: {shown}{more} {verb} under no leaf switch")

    @classmethod
    def from_leaves(cls, leaves: dict[str, list[str]], source: str = "(model)") -> Topology:
        """A topology built in code (a simulation's), with leaves alone and no tree above them; checked
        as a file is: at least one leaf, and no host under two."""
        if not leaves:
            raise CommbenchError(f"{source}: no leaf switch")
        owner: dict[str, str] = {}
        for leaf, hosts in leaves.items():
            for host in hosts:
                if owner.setdefault(host, leaf) != leaf:
                    raise CommbenchError(f"{source}: host {host} is under two leaf switches: {owner[host]} and {leaf}")
        return cls(leaves={leaf: tuple(dict.fromkeys(hosts)) for leaf, hosts in leaves.items()}, parents={}, source=source)


@dataclass
class _Switch:
    name: str
    line: int
    nodes: Optional[list[str]]
    switches: Optional[list[str]]


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first physical line number, text) of each non-blank line, comments gone and continuations
    joined. The comment goes first, as in Slurm, so `a \\  # note` still continues."""
    out: list[tuple[int, str]] = []
    pending: Optional[tuple[int, str]] = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].rstrip()
        more = line.endswith("\\")
        if more:
            line = line[:-1]
        if pending is not None:
            pending = (pending[0], pending[1] + " " + line)
        else:
            pending = (number, line)
        if not more:
            if pending[1].strip():
                out.append(pending)
            pending = None
    if pending is not None and pending[1].strip():
        out.append(pending)
    return out


def _parse_line(path: str, number: int, line: str) -> _Switch:
    where = f"{path}:{number}: "
    control = _CONTROL.search(line)
    if control:
        raise CommbenchError(f"{where}a control character (U+{ord(control.group()):04X}) at column {control.start() + 1}; "
                             f"names hold none")
    values: dict[str, str] = {}
    for token in line.split():
        key, sep, value = token.partition("=")
        if not sep or not key or not value:
            raise CommbenchError(f"{where}{_q(token)} is not a name=value setting")
        name = KEYS.get(key.lower())
        if name is None:
            raise CommbenchError(f"{where}unknown key {_q(key)} (topology.conf's tree keys are {', '.join(KEYS.values())})")
        if name in values:
            raise CommbenchError(f"{where}{name} is given twice on one line")
        values[name] = value
    if "SwitchName" not in values:
        raise CommbenchError(f"{where}a line without SwitchName=; each line defines one switch")
    switch = values["SwitchName"]
    if any(ch in switch for ch in "[],"):
        raise CommbenchError(f"{where}SwitchName={switch} names more than one switch; a line defines one")
    if "Nodes" not in values and "Switches" not in values:
        raise CommbenchError(f"{where}switch {switch} has neither Nodes= nor Switches=")
    if "LinkSpeed" in values and not _NUMBER.fullmatch(values["LinkSpeed"]):
        raise CommbenchError(f"{where}LinkSpeed={values['LinkSpeed']} is not a whole number")

    def hostlist(key: str) -> Optional[list[str]]:
        if key not in values:
            return None
        try:
            # Repeats within one line are the same host or switch said twice, not a conflict.
            return list(dict.fromkeys(expand_hostlist(values[key])))
        except CommbenchError as e:
            raise CommbenchError(f"{where}{key}=: {e}") from None

    return _Switch(switch, number, hostlist("Nodes"), hostlist("Switches"))


def _cycle(parents: dict[str, str], lines: dict[str, int]) -> Optional[list[str]]:
    """A cycle of the switch tree, as parent, child, ..., parent from the switch defined first in it;
    None where there is none. Each switch has one parent at most, so walking up finds every cycle."""
    done: set[str] = set()
    for start in lines:
        path: list[str] = []
        node: Optional[str] = start
        while node is not None and node not in done and node not in path:
            path.append(node)
            node = parents.get(node)
        if node is not None and node in path:
            ring = path[path.index(node):]  # child, parent, grandparent, ... (up the tree)
            first = min(ring, key=lambda s: lines[s])
            k = ring.index(first)
            up = ring[k:] + ring[:k]
            return [first] + up[:0:-1] + [first]
        done.update(path)
    return None


def load_topology(path: str) -> Topology:
    """The topology of a Slurm topology.conf (tree plugin syntax); see the module docstring."""
    from ..results.document import read_bounded
    try:
        # Bounded, whatever the path is: a FIFO with no writer reads as empty, a device (/dev/zero)
        # is refused past the size.
        text = read_bounded(path, "topology file", MAX_TOPOLOGY_BYTES).decode("utf-8")
    except UnicodeDecodeError as e:
        raise CommbenchError(f"{path}: cannot read the topology file: not UTF-8 text ({e.reason} at byte {e.start})") from None

    switches: dict[str, _Switch] = {}
    owner: dict[str, _Switch] = {}
    named = 0
    for number, line in _logical_lines(text):
        sw = _parse_line(path, number, line)
        named += len(sw.nodes or ())
        if named > MAX_HOSTS:  # each line's hostlist is bounded; so are all of them together
            raise CommbenchError(f"{path}:{number}: more than {MAX_HOSTS:,} host names in all")
        if sw.name in switches:
            raise CommbenchError(f"{path}:{number}: switch {sw.name} is defined twice (first at line {switches[sw.name].line})")
        switches[sw.name] = sw
        for host in sw.nodes or ():
            first = owner.setdefault(host, sw)
            if first is not sw:
                raise CommbenchError(f"{path}:{number}: host {host} is under two leaf switches: "
                                     f"{first.name} (line {first.line}) and {sw.name}")

    # Switches= may name a switch defined further down, so the tree is checked once all are read.
    parents: dict[str, str] = {}
    for sw in switches.values():
        for child in sw.switches or ():
            if child not in switches:
                raise CommbenchError(f"{path}:{sw.line}: Switches= of {sw.name} names {child}, which no SwitchName= line defines")
            if child in parents:
                raise CommbenchError(f"{path}:{sw.line}: switch {child} is under two parents: "
                                     f"{parents[child]} (line {switches[parents[child]].line}) and {sw.name}")
            parents[child] = sw.name
    ring = _cycle(parents, {name: sw.line for name, sw in switches.items()})
    if ring is not None:
        raise CommbenchError(f"{path}:{switches[ring[0]].line}: the switches form a cycle: "
                             f"{' contains '.join(ring if len(ring) <= SHOWN else ring[:SHOWN] + ['...', ring[-1]])}")

    leaves = {sw.name: tuple(sw.nodes) for sw in switches.values() if sw.nodes is not None}
    if not leaves:
        raise CommbenchError(f"{path}: no leaf switch (no SwitchName= line with Nodes=); is this a topology.conf?")
    return Topology(leaves=leaves, parents=parents, source=path)
