"""Result documents for tests that need files a user might hand to the analysis commands."""

import numpy as np

from commbench.results.document import header, new_document
from commbench.results.record import measured


def record(*args, **kwargs) -> dict:
    """A record as a run makes it (results.record.measured), in the result file's form."""
    return measured(*args, **kwargs).as_dict()


def row(size: int, t_us: float, impl: str = "ring@mpi", op: str = "allreduce") -> dict:
    """One record of a two-rank run whose five samples scatter by 2 % around t_us."""
    samples = t_us * np.array([0.98, 1.0, 1.02, 1.01, 0.99])
    return record(op, impl, "float32", "sum", 2, size, size // 4, samples * 1e-6, 0)


def result_doc(rows: list, status: str = "complete", env: dict = None, argv: list = None) -> dict:
    sizes = sorted({r["size_bytes"] for r in rows})
    head = header(argv or ["commbench", "allreduce"],
                  {"op": "allreduce", "impls": ["ring@mpi"], "sizes": sizes, "dtype": "float32", "redop": "sum",
                   "place": "out", "policy": {}},
                  {"hosts": ["h"], "ranks": 2, "launcher": "mpi", "cpu_model": "cpu", "cores": 2, "memory_bytes": 1,
                   "os": "Linux", "python": "3.11", "torch": "2", "mpi": "Open MPI v5"},
                  env or {}, tool={"name": "commbench", "version": "0.1.0", "git_commit": None},
                  created="2026-11-21T00:00:00+00:00")
    return new_document(head, rows, status)


def ring_run(alpha_us: float = 3.0, gbps: float = 5.0) -> dict:
    """A valid two-rank ring run from 1K to 16M: t = 2 alpha + n / BW."""
    return result_doc([row(n, 2 * alpha_us + n / (gbps * 1e3)) for n in (1 << k for k in range(10, 25))])
