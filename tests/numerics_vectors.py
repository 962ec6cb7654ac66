"""Run under mpirun: what `commbench numerics` measures (commbench.numerics_run.rows, on every CPU
impl), with the reduced vectors kept, so that a test can recompute every figure of the command's
result file from them. Writes OUT.npz on rank 0: one array per `impl/dtype/ranks`, and the rows as
JSON under `rows`.

    numerics_vectors.py OUT.npz DATA SEED COUNT RANKS DTYPES
"""

import json
import sys

import numpy as np

from commbench import collectives
from commbench.launch.world import init_world
from commbench.run.config import RunConfig
from commbench.run.numerics import Plan, rows
from commbench.transports import impls_for

out, data, seed, count, ranks, dtypes = sys.argv[1:]
world = init_world()
impls = list(impls_for(collectives.get("allreduce"), "cpu").values())
cfg = RunConfig(op="allreduce", impls=tuple(i.name for i in impls), sizes=(), dtype=dtypes)
for impl in impls:
    impl.prepare(world, cfg)
plan = Plan(data, int(seed), int(count), tuple(int(p) for p in ranks.split(",")), tuple(dtypes.split(",")), 2)
got = [g for g in rows(world, plan, impls, cfg) if g is not None]
if world.rank == 0:
    vectors = {f"{r['impl']}/{r['dtype']}/{r['ranks']}": v for r, v in got}
    np.savez(out, rows=json.dumps([r for r, _ in got]), **vectors)
world.close()
