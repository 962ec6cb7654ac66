"""The NCCL knobs a run forces per variant of NCCL's call (--nccl-algo ring,tree): one line each. Each
knob's option, the check of what it is given, the variants' product, the environment each forced
communicator is made under, the field its records carry (a series field: results/series.py), the
result schema's field, the forced impl's description and the default-against-best summary follow from
its entry. It sits with the result format: every reader of a result file names series by it."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Optional

from ..errors import CommbenchError


@dataclass(frozen=True)
class Knob:
    """One of NCCL's environment variables, forced per variant: `field` (nccl_*) is what its records
    carry, `env` what NCCL reads as each communicator is initialised, `names` the values NCCL takes,
    in NCCL's spelling and order (NCCL reads them in any case, and so does the option)."""
    field: str
    env: str
    names: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.field.startswith("nccl_"):
            raise ValueError(f"an NCCL knob's field starts with nccl_: {self.field}")

    @property
    def option(self) -> str:
        return "--" + self.field.replace("_", "-")

    @property
    def label(self) -> str:
        """What names the knob in a series' name: 'algo' of 'nccl algo=ring'."""
        return self.field.removeprefix("nccl_")

    @property
    def help(self) -> str:
        return (f"Impl nccl: also measure it with {self.env} forced to each of these (NCCL's names, any case: "
                f"{', '.join(self.names)}), beside NCCL's own choice; with other --nccl-* options, every combination.")

    def parse(self, text: Optional[str]) -> list[str]:
        """The option's comma list as NCCL's names in lower case, in the order given ([] where it was
        not given); refused in one line where a name is not NCCL's."""
        if text is None:
            return []
        typed = [t.strip() for t in text.split(",")]
        known = {n.lower() for n in self.names}
        for t in typed:
            if t.lower() not in known:
                raise CommbenchError(f"{self.option} '{text}': {t or 'an empty name'} is not one of NCCL's names: "
                                     f"{', '.join(self.names)} (a comma list, any case)")
        return list(dict.fromkeys(t.lower() for t in typed))


# NCCL's names: ncclAlgoStr and ncclProtoStr (init.cc), in NCCL's order.
KNOBS: tuple[Knob, ...] = (
    Knob("nccl_algo", "NCCL_ALGO", ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")),
    Knob("nccl_proto", "NCCL_PROTO", ("LL", "LL128", "Simple")),
)


def fields() -> tuple[str, ...]:
    return tuple(k.field for k in KNOBS)


def variants(chosen: dict[str, list[str]]) -> list[dict]:
    """Every combination of the values each knob was given (`chosen`: field -> parsed names; a knob
    given none keeps NCCL's choice), each as the fields its records carry: {"nccl_algo": "ring",
    "nccl_proto": "simple"}; [] where no knob was given a value."""
    if not any(chosen.get(k.field) for k in KNOBS):
        return []
    return [{k.field: v for k, v in zip(KNOBS, combo) if v}
            for combo in itertools.product(*(chosen.get(k.field) or [None] for k in KNOBS))]


def environment(variant: dict) -> dict[str, Optional[str]]:
    """Each knob's variable as a variant sets it while its communicator is made (None: unset)."""
    return {k.env: variant.get(k.field) for k in KNOBS}


def forced_text(h: dict) -> str:
    """'algo=ring proto=simple' of a record or series head; '' for NCCL's own choice."""
    return " ".join(f"{k.label}={h[k.field]}" for k in KNOBS if h.get(k.field))


def schema_properties() -> dict:
    """The knobs' fields as the result schema describes them (a record's, a variant's)."""
    return {k.field: {"enum": [n.lower() for n in k.names]} for k in KNOBS}
