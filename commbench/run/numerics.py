"""`commbench numerics` on the ranks: at each rank count p, the first p ranks of the launch reduce
the same global batch of C contributions (C = the largest count). Each rank adds its share of the
contributions in the dtype, in order, as gradient accumulation over micro-batches does; the impl
all-reduces those sums; rank 0 measures the result against the correctly rounded sum of all C
contributions (numerics.py), which is the same at every p.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Iterator, Optional

import click
import numpy as np

from ..analysis.numerics import contribution, drift, errors, reference, round_to, shares
from ..collectives import get
from ..collectives.dtypes import numpy_dtype, redop_code
from ..launch import watchdog
from ..launch.world import World
from ..results.document import default_path
from ..transports.nccl import communicator
from .buffers import allocator
from .output import FileOutput

_SUM = redop_code("sum")


@dataclass(frozen=True)
class Plan:
    data: str  # numerics.DATA
    seed: int
    count: int  # elements per contribution
    ranks: tuple[int, ...]  # rank counts, ascending
    dtypes: tuple[str, ...]
    repeats: int  # calls per (rank count, dtype, impl), compared bit for bit

    @property
    def contributions(self) -> int:
        return self.ranks[-1]

    def describe(self) -> dict:
        return {**asdict(self), "ranks": list(self.ranks), "dtypes": list(self.dtypes),
                "contributions": self.contributions}


def digest(values: np.ndarray) -> str:
    """A fingerprint of a vector's bits: BLAKE2b (16 bytes) of its elements' bytes in the dtype."""
    return hashlib.blake2b(np.ascontiguousarray(values).tobytes(), digest_size=16).hexdigest()


def local_sum(values: list[np.ndarray], dtype: str) -> np.ndarray:
    """A rank's contributions, each rounded to the dtype, added in order in the dtype, one rounding per
    addition as on a GPU. NumPy's arithmetic (ml_dtypes' for bfloat16), not torch's: the same bits, as
    each adds two 16-bit values in float32 and rounds once to nearest even (float32 holds twice their
    precision and more, so that rounding twice is rounding once), and a rank on host memory loads no
    torch for it (seconds of its start)."""
    parts = [round_to(v, dtype).astype(numpy_dtype(dtype)) for v in values]
    total = parts[0].copy()
    with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN are the dtype's results, as on a GPU
        for part in parts[1:]:
            total += part
    return total


class _Batch:
    """The global batch as one rank sees it: the contributions it needs, made on first use, and (on
    rank 0) the correctly rounded sums of all of them per dtype."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self._values: dict[int, np.ndarray] = {}
        self._references: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def values(self, index: int) -> np.ndarray:
        if index not in self._values:
            self._values[index] = contribution(self.plan.data, self.plan.seed, index, self.plan.count)
        return self._values[index]

    def reference(self, dtype: str) -> tuple[np.ndarray, np.ndarray]:
        """(the correctly rounded sums, the sums of the contributions' magnitudes) in dtype."""
        if dtype not in self._references:
            every = np.stack([round_to(self.values(c), dtype) for c in range(self.plan.contributions)])
            self._references[dtype] = reference(every, dtype), np.abs(every).sum(axis=0)
        return self._references[dtype]


def rows(world: World, plan: Plan, impls: list, cfg) -> Iterator[Optional[tuple[dict, np.ndarray]]]:
    """Every rank runs this to its end. Rank 0 gets, per (rank count, dtype, impl), the row of figures
    and its own reduced vector (float64); the other ranks of the count get None."""
    batch = _Batch(plan)
    first: dict[tuple[str, str], np.ndarray] = {}  # rank 0: the vector at the smallest count
    for p in plan.ranks:
        sub = world.subset(p)
        if sub is not None:
            try:
                yield from _rows_at(sub, plan, impls, cfg, batch, first)
            finally:
                sub.close()
        world.quiet_barrier()  # the ranks left out wait without taking the cores of those in


def _rows_at(sub: World, plan: Plan, impls: list, cfg, batch: _Batch, first: dict):
    share = shares(plan.contributions, sub.size)[sub.rank]
    for impl in impls:
        impl.prepare(sub, cfg)
    allocate = allocator()
    if cfg.device == "cuda":
        communicator(sub, cfg.timeout_s)
        allocate = allocator(sub.device)
    for dtype in plan.dtypes:
        local = local_sum([batch.values(c) for c in share], dtype)
        send, recv = allocate(plan.count, dtype), allocate(plan.count, dtype)
        for impl in impls:
            # Counts grow (Plan.ranks is sorted): a rank left out of this one was never armed, and
            # waits for it unwatched rather than past an old deadline.
            watchdog.arm(f"numerics {impl.name} {dtype} on {sub.size} ranks")
            prints, result = _calls(sub, impl, cfg, plan.repeats, local, send, recv)
            if sub.rank != 0:
                yield None
                continue
            (ref, abs_sum), key = batch.reference(dtype), (impl.name, dtype)
            row = {"impl": impl.name, "dtype": dtype, "ranks": sub.size, "count": plan.count,
                   **errors(result, ref, abs_sum, dtype),
                   "ranks_identical": all(len(set(ds)) == 1 for ds in prints),
                   "repeat_identical": all(ds == prints[0] for ds in prints),
                   "drift_max_rel": drift(result, first[key], ref) if key in first else None,
                   "digest": prints[0][0]}
            first.setdefault(key, result)
            yield row, result


def _calls(sub: World, impl, cfg, repeats: int, local, send, recv) -> tuple[Optional[list], Optional[np.ndarray]]:
    """`repeats` all-reduces of the same sums: every call's fingerprints of all ranks, and rank 0's
    first vector (float64), on rank 0; (None, None) elsewhere."""
    coll = get("allreduce")
    prints, result = [], None
    for _ in range(repeats):
        send[:] = local
        recv[:] = float("nan")  # an element the call leaves unwritten shows as not finite
        impl.rank_times(sub, coll, send, recv, _SUM, 1, cfg)
        values = recv.to_numpy() if hasattr(recv, "to_numpy") else recv.copy()  # a copy: recv takes the next call
        prints.append(sub.gather(digest(values)))
        if result is None and sub.rank == 0:
            result = values.astype(np.float64)
    return (prints, result) if sub.rank == 0 else (None, None)


class NumericsOutput(FileOutput):
    """The output of a numerics run: the result file (created before the first call, each row written
    as it comes, complete or failed at the end, never overwritten) and the table on stdout at the end."""

    def __init__(self, meta: dict, plan: Plan, output: Optional[str]):
        from ..formats.numerics import header
        super().__init__(output or default_path("numerics"), {**meta, "numerics": {**plan.describe(), "rows": []}})
        self.integer = plan.data == "integer"
        for line in header(self.file.doc):
            click.echo(line)

    def add(self, row: dict) -> int:
        """Keeps a row; returns its elements not correctly rounded where the data is integer (exact
        in every dtype and order, so any such element is wrong), else 0."""
        section = self.file.doc["numerics"]
        self.attach("numerics", {**section, "rows": [*section["rows"], row]})
        return round(row["not_correctly_rounded"] * row["count"]) if self.integer else 0

    def summary(self) -> None:
        from ..formats.console import numerics_lines
        for line in numerics_lines(self.file.doc):
            click.echo(line)
        if self.integer:
            ok = all(r["not_correctly_rounded"] == 0 for r in self.file.doc["numerics"]["rows"])
            verdict = "every result exact, OK" if ok else "FAILED"
            click.echo(f"# integer data, exact in every dtype and order: {verdict}")
        click.echo(f"# results: {self.file.path}")
