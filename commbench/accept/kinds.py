"""The kinds of step a plan may run, one entry each: what accept adds to the command's line, what it
keeps of the run, how that is judged and which limits only it takes. A command of no entry here is a
measuring command of the plain kind: a result file given with -o, judged by what its sections hold
(judge.result_checks), the limits every measuring step takes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from .judge import doctor_checks


@dataclass(frozen=True)
class Kind:
    command: str
    measuring: bool = True  # runs on the plan's ranks (a launch) and writes a result file given with -o
    argv: tuple[str, ...] = ()  # what accept adds to the command's line
    # Its stdout is the step's file (<slug>.json), the JSON it prints, judged by `judge` where given.
    keeps_stdout: bool = False
    judge: Optional[Callable[[Optional[dict]], list]] = None
    limits: tuple[str, ...] = ()  # the limits (plan.LIMITS) that only this kind takes


KINDS = {k.command: k for k in (
    Kind("doctor", measuring=False, argv=("--json",), keeps_stdout=True, judge=doctor_checks),
    Kind("topo", measuring=False, argv=("--json",), keeps_stdout=True),
    Kind("version", measuring=False, argv=("-v",)),
    Kind("scale", limits=("min_efficiency_pct",)),
)}
# The limits some kind alone takes, and which kind.
OWNED_LIMITS = {limit: k.command for k in KINDS.values() for limit in k.limits}


def kind_of(command: str) -> Kind:
    return KINDS.get(command) or Kind(command)
