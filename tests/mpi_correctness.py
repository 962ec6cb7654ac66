"""Run under mpirun: every native all-reduce impl against a float64 reference built here from all
ranks' inputs. Prints one line per failure and 'CHECKED n' on rank 0."""

import sys

import numpy as np
import torch
from mpi4py import MPI

from commbench import _host
from commbench.spec import DTYPES, REDOPS

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
REF = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}
counts = [0, 1, 2, size - 1, size + 1, 3 * size + 2, 1000, 65537]
checked = 0
failures = []
for impl, chunks in (("ring", [0]), ("tree", [4 * 8, 1 << 20]), ("mpi", [0])):
    for dname, dtype in DTYPES.items():
        for oname, code in REDOPS.items():
            for count in counts:
                for in_place in (False, True):
                    for chunk in chunks:
                        send = torch.empty(count, dtype=dtype)
                        _host.fill_pattern(send, code, rank, size)
                        inputs = comm.allgather(send.to(torch.float64).numpy())
                        reference = REF[oname](np.stack(inputs), axis=0) if count else np.zeros(0)
                        recv = send if in_place else torch.full((count,), 77, dtype=dtype)
                        _host.allreduce_times(impl, send, recv, code, 1, comm.py2f(), max(chunk, 8))
                        got = recv.to(torch.float64).numpy()
                        bad = int(np.count_nonzero(got != reference))
                        claimed = _host.count_wrong(recv, code, size)
                        if bad or claimed:
                            failures.append(f"{impl} {dname} {oname} n={count} in_place={in_place} "
                                            f"chunk={chunk}: {bad} differ from reference, checker says {claimed}")
                        checked += 1
# The checker must see corruption: flip one element of a correct result.
probe = torch.empty(100, dtype=torch.float32)
_host.fill_pattern(probe, 0, rank, size)
_host.allreduce_times("ring", probe, probe, 0, 1, comm.py2f(), 64)
probe[17] += 1
if _host.count_wrong(probe, 0, size) != 1:
    failures.append("checker missed a corrupted element")
all_failures = comm.gather(failures)
if rank == 0:
    for f in sum(all_failures, []):
        print("FAIL", f)
    print("CHECKED", checked)
sys.exit(0)
