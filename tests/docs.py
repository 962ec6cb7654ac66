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


# A node of a fleet: the sizes of its sweeps.
FLEET_SIZES = (1024, 65536, 4 << 20)


def node_doc(host: str, rng, busbw=1.0, latency=1.0, p2p=1.0, cpu="AMD EPYC 9654") -> dict:
    """One node's results: an all-reduce sweep and a p2p bandwidth sweep, each figure off by a
    random 2 % at most, times `busbw`, `latency` (the small sizes' time) and `p2p` (bandwidth)."""
    def t_us(n):  # a ring of 2 ranks at 10 GB/s after 5 us
        return 5.0 * latency + n / (10e3 * busbw)
    recs = [record("allreduce", "ring@mpi", "float32", "sum", 2, n, n // 4,
                   np.full(5, t_us(n) * rng.uniform(0.98, 1.02)) * 1e-6, 0) for n in FLEET_SIZES]
    recs += [record("bandwidth", "mpi", "uint8", "none", 2, n, n,
                    np.full(5, (0.5 + n / (8e3 * p2p)) * rng.uniform(0.98, 1.02)) * 1e-6, 0, pair=[0, 1], window=64)
             for n in FLEET_SIZES]
    return {"schema_version": 1, "tool": {"name": "commbench", "version": "0.1.0", "git_commit": None},
            "created": "2026-11-21T00:00:00+00:00", "argv": ["commbench"],
            "config": {"op": "allreduce", "impls": ["ring@mpi"], "sizes": list(FLEET_SIZES), "dtype": "float32",
                       "redop": "sum", "place": "out", "policy": {}},
            "machine": {"hosts": [host], "ranks": 2, "launcher": "mpi", "cpu_model": cpu, "cores": 96,
                        "memory_bytes": 1, "os": "Linux", "python": "3.11", "torch": "2", "mpi": "Open MPI v5"},
            "env": {}, "status": "complete", "error": None, "results": recs}


# Three nodes of a fleet each worse in one metric of their own: node -> (what, the metric fleet names).
PLANTED = {17: ("busbw", "allreduce ring@mpi (2 ranks) busbw@4M (GB/s)"),
           503: ("latency", "allreduce ring@mpi (2 ranks) time@1K (us)"), 911: ("p2p", "bandwidth mpi (pair 0-1) bw@4M (GB/s)")}


def write_fleet(folder: str, nodes: int, seed: int = 7) -> None:
    """`nodes` node files (node0000.json...) in folders of folders, as a fleet's runs pile up, with
    the PLANTED nodes' figures 1.5x slower or 0.6x the bandwidth."""
    import json
    import os
    rng = np.random.default_rng(seed)
    for i in range(nodes):
        planted = PLANTED.get(i)
        change = {planted[0]: 1.5 if planted[0] == "latency" else 0.6} if planted else {}
        day = os.path.join(folder, f"day{i % 3}")
        os.makedirs(day, exist_ok=True)
        with open(os.path.join(day, f"node{i:04d}.json"), "w") as f:
            json.dump(node_doc(f"node{i:04d}", rng, **change), f)
