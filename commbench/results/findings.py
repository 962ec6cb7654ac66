"""The kinds of finding a host-level `links` run reports (analysis/host/verdicts.py finds them), one
entry each: the order in which a host's findings are listed, whether it FAILs the hosts it names, its
evidence text on a verdict line and its spec in `benchmarks/links_at_scale.py`'s `--plant` syntax. A
kind that is not here cannot be reported: every lookup is by name, with no fall-through, and the
result schema's enum of a finding's kind is these names (document.schema), so a file that names
another is refused when it is read. Here, with the result format, rather than with the analysis
that finds them: every reader of a result file validates against them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional


def _pct(ratio: float) -> str:
    return f"{100 * ratio:.0f} % of the typical flow"


def _of(f: dict) -> str:
    """How many measurements agreed out of how many: every finding's confidence."""
    return f"{f['agreed']} of {f['measured']} measurements"


def _lost(f: dict, host: str) -> str:
    return f["why"]


def _untested(f: dict, host: str) -> str:
    return "no flow with another host was measured"


def _switch(f: dict, host: str) -> str:
    return (f"{f['subject']}: flows to other leaves at {_pct(f['ratio'])} from all {f['hosts_slow']} hosts below it "
            f"({_of(f)}, {f['partners']} partners), {100 * f['inside']:.0f} % inside the leaf")


def _uplink(f: dict, host: str) -> str:
    if "links" in f:  # named from the host pairs through its uplinks (host_verdicts.UPLINK_LINKS)
        return (f"{f['subject']}: {f['links']} host pairs through its uplinks, from {f['from']} of its hosts, slow both "
                f"ways at {_pct(f['ratio'])} ({_of(f)} slow when measured again): a degraded uplink")
    return (f"{f['subject']}: {100 * f['share']:.0f} % of its flows to other leaves slow ({_of(f)}) where the other "
            f"leaves' flows of the same rounds give {100 * f['expected']:.1f} %: a degraded uplink")


def _host(f: dict, host: str) -> str:
    return f"{_pct(f['ratio'])} on every rail ({f['rails']}), {_of(f)} slow with {f['partners']} partners"


def _nic(f: dict) -> str:
    return f" ({f['nic']})" if f.get("nic") else ""


def _rail(f: dict, host: str) -> str:
    return f"local rank {f['rail']}{_nic(f)}: {_pct(f['ratio'])} both ways, {_of(f)} slow with {f['partners']} partners"


def _side(word: str) -> Callable[[dict, str], str]:
    def text(f: dict, host: str) -> str:
        return (f"local rank {f['rail']}{_nic(f)} {word}: {_pct(f['ratio'])}, {_of(f)} slow with {f['partners']} "
                f"partners, healthy the other way")
    return text


def _link(f: dict, host: str) -> str:
    other = next(h for h in f["hosts"] if h != host)
    rails = ",".join(map(str, f["rails_slow"]))
    return (f"{other}: {_pct(f['ratio'])} on rail {rails}, {_of(f)} slow when measured again, healthy with its "
            f"{f['others'][host]} other partner(s)")


def _rank(f: dict, host: str) -> str:
    local = "-".join(map(str, f["local"]))
    return f"local rank {local}: {_pct(f['ratio'])} with {f['agreed']} of its {f['measured']} peers in the host"


def _pair(f: dict, host: str) -> str:
    local = "-".join(map(str, f["local"]))
    return f"local ranks {local}: {_pct(f['ratio'])} inside the host"


def _transient(f: dict, host: str) -> str:
    return (f"{f['subject']}: slow in the first rounds, {_of(f)} slow when measured again in light rounds: "
            f"not repeated")


@dataclass(frozen=True)
class Kind:
    name: str
    fails: bool  # whether it FAILs the hosts it names (a transient slowdown does not)
    text: Callable[[dict, str], str]  # (finding, one of its hosts) -> evidence after "<kind>: "
    spec: Optional[Callable[[dict], str]]  # the finding as links_at_scale.py plants it; None: never planted
    plants: str = ""  # --plant's syntax for the kind ("" where it is not planted)


def _named(f: dict) -> str:
    return f"{f['kind']}:{f['subject']}"


def _on_rail(f: dict) -> str:
    return f"{f['kind']}:{f['hosts'][0]}:{f['rail']}"


KINDS = {k.name: k for k in (
    Kind("lost", True, _lost, _named),
    Kind("untested", True, _untested, _named),
    Kind("switch", True, _switch, _named, "switch:LEAF"),
    Kind("uplink", True, _uplink, _named, "uplink:LEAF"),
    Kind("host", True, _host, _named, "host:NAME"),
    Kind("rail", True, _rail, _on_rail, "rail:NAME:LOCALRANK"),
    Kind("rx", True, _side("receiving"), _on_rail, "rx:NAME:LOCALRANK"),
    Kind("tx", True, _side("sending"), _on_rail, "tx:NAME:LOCALRANK"),
    Kind("link", True, _link, lambda f: "link:" + ":".join(sorted(f["hosts"])), "link:NAME:NAME"),
    Kind("rank", True, _rank, _named),
    Kind("pair", True, _pair, _named),
    Kind("transient", False, _transient, None),
)}
ORDER = list(KINDS)


def evidence(f: dict, host: str) -> str:
    """A finding as `<kind>: <evidence>` on the verdict line of `host`, one of its hosts."""
    return f"{f['kind']}: {KINDS[f['kind']].text(f, host)}"


def failing(findings: list[dict]) -> list[dict]:
    """The findings that FAIL their hosts."""
    return [f for f in findings if KINDS[f["kind"]].fails]


def verdicts(findings: list[dict], hosts: list[str]) -> dict[str, str]:
    """{host: 'PASS' or 'FAIL <kind>: <evidence>[; ...]'} for every host, in order; a finding of a kind
    that does not fail leaves its hosts' verdicts as they are."""
    mine: dict[str, list[str]] = {h: [] for h in dict.fromkeys(hosts)}
    for f in findings:
        if KINDS[f["kind"]].fails:
            for h in f["hosts"]:
                mine[h].append(evidence(f, h))
    return {h: "FAIL " + "; ".join(texts) if texts else "PASS" for h, texts in mine.items()}


def verdict_lines(verdict: dict[str, str]) -> list[str]:
    width = max((len(h) for h in verdict), default=0)
    return [f"{h:<{width}} | {v}" for h, v in verdict.items()]


def named(findings: list[dict]) -> set[str]:
    """The findings that FAIL hosts, as the specs `links_at_scale.py` plants (host:H, rail:H:I, rx:H:I,
    link:A:B, switch:LEAF, uplink:LEAF...)."""
    return {KINDS[f["kind"]].spec(f) for f in findings if KINDS[f["kind"]].spec is not None}


def planted_kinds() -> list[str]:
    """The kinds a model plants, in --plant's syntax."""
    return [k.plants for k in KINDS.values() if k.plants]
