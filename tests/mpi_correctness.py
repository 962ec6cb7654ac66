"""Run under mpirun: every collective by every CPU impl (the MPI library's call, our algorithms over
MPI, gloo) against a float64 reference built here with numpy from all ranks' patterns, for every dtype,
reduction, in and out of place, over counts that the ranks do not divide. The checker the sweeps use
(the registry's expected segments) must agree. Prints one line per failure and 'CHECKED n' on
rank 0."""

import sys

import numpy as np
from mpi4py import MPI

from commbench import _host, collectives
from commbench.collectives.base import PIPELINED, REDUCED, UNTOUCHED
from commbench.collectives.dtypes import DTYPES, REDOPS, itemsize_of, numpy_dtype
from commbench.launch.world import init_world
from commbench.run.buffers import _STALE, Buffers, allocator
from commbench.run.collective import MOVE_ONLY, count_wrong, fill_inputs
from commbench.run.config import RunConfig
from commbench.run.testdata import HostData
from commbench.transports import gloo, impls_for
from commbench.transports.native import native_call

world = init_world()
comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
REF = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}
COUNTS = [0, 1, 2, size - 1, size + 1, 3 * size + 2, 1000, 65537]

# Every dtype up to 2 ranks, where each reducer and each element size meets every algorithm, op, count
# and placement; from 3 ranks on, where the schedules' uneven splits and partial trees appear, one
# dtype per element size (8, 2 and 4 bytes, float and integer): the dtype does not change a schedule.
CHECKED_DTYPES = list(DTYPES) if size <= 2 else ["float64", "bfloat16", "int32"]
# --no-gloo leaves gloo out (test_mpi_collectives.GLOO_RANKS says where it runs).
WITH_GLOO = "--no-gloo" not in sys.argv[1:]
if WITH_GLOO:
    gloo.join(world)
data = HostData(world)
HOST = allocator()


def chunks(algorithm, count: int) -> list:
    """Pipeline chunks (bytes) to check a pipelined algorithm with: many chunks and a partial last one,
    and the whole buffer in one. Tiny chunks only on counts that make a few hundred of them: on 65537
    elements they made 16K messages per hop, most of the matrix's time."""
    if algorithm not in PIPELINED:
        return [8]
    return [4 * 8 if count <= 1000 else 4096, 1 << 20]


def pattern(coll, j, first, count, dtype, code):
    """Rank j's values at pattern indices first, first + 1, ... as its input holds them, in float64."""
    t = np.empty(count, dtype=numpy_dtype(dtype))
    _host.fill_pattern(t, code, j, size, first)
    return t.astype(np.float64)


def rank_input(coll, j, root, shape, dtype, code):
    """Rank j's send buffer, rebuilt here: the fill is deterministic, so no rank needs another's."""
    t = np.full(shape.send, 77, dtype=numpy_dtype(dtype))
    for seg in coll.inputs(j, size, root, shape):
        t[seg.offset:seg.offset + seg.count] = pattern(coll, j, seg.first, seg.count, dtype, code)
    return t.astype(np.float64)


def reference(coll, op, root, shape, in_place, dtype, code):
    """What this rank's receive buffer must hold, built here with numpy from the registry's segments
    (a collective module is the one description of what it delivers): a rank's values, their
    reduction over all ranks in float64, or what the call must leave alone (the rank's input in
    place, else the stale value). The native checker compares element by element in its own code,
    and the MPI library's own call, an implementation of none of this, meets the same reference."""
    want = np.full(shape.recv, float(_STALE))
    for seg in coll.expected(rank, size, root, shape):
        where = slice(seg.offset, seg.offset + seg.count)
        if seg.source == REDUCED:
            want[where] = REF[op](np.stack([pattern(coll, j, seg.first, seg.count, dtype, code) for j in range(size)]),
                                  axis=0)
        elif seg.source >= 0 or (seg.source == UNTOUCHED and in_place):
            want[where] = pattern(coll, rank if seg.source == UNTOUCHED else seg.source, seg.first, seg.count, dtype, code)
    return want


checked = 0
failures = []
for coll in collectives.all_collectives():
    ops = list(REDOPS) if coll.reduces else [None]
    impls = [impl for impl in impls_for(coll, "cpu").values() if WITH_GLOO or impl.transport is not gloo.GLOO]
    for dname in CHECKED_DTYPES:
        itemsize = itemsize_of(dname)
        for op in ops:
            code = REDOPS[op] if op else MOVE_ONLY
            for i, count in enumerate(COUNTS):
                shape = coll.shape(count * itemsize, itemsize, size, align=1)  # odd blocks too
                root = i % size
                # This rank's input and the reference, once for all impls: they depend on neither.
                mine = rank_input(coll, rank, root, shape, dname, code)
                for in_place in ((False, True) if coll.in_place else (False,)):
                    want = reference(coll, op, root, shape, in_place, dname, code)
                    for impl in impls:
                        for chunk in chunks(impl.algorithm, count):
                            send, recv = Buffers(coll, shape, dname, (in_place,), HOST).views(shape, rank, in_place)
                            fill_inputs(data, send, coll.inputs(rank, size, root, shape), code)
                            if not np.array_equal(mine, send.astype(np.float64)):
                                failures.append(f"{coll.name}: rank {rank}'s input differs from its rebuilt copy")
                            cfg = RunConfig(op=coll.name, impls=(impl.name,), sizes=(shape.size,), root=root,
                                            place="in" if in_place else "out", chunk_bytes=chunk)
                            # One call through the transport, as a sweep's check makes it; no times gathered.
                            impl.transport.times(world, coll, impl.algorithm, send, recv, code, 1, cfg, 1, 0.0)
                            bad = int(np.count_nonzero(recv.astype(np.float64) != want))
                            claimed = count_wrong(data, recv, coll.expected(rank, size, root, shape), code, in_place)
                            if bad or claimed:
                                failures.append(f"{coll.name} {impl.name} {dname} {op} count={count} root={root} "
                                                f"in_place={in_place} chunk={chunk}: {bad} differ from the reference, "
                                                f"checker says {claimed}")
                            checked += 1
    # The checker must see corruption: flip one element of a correct result.
    shape = coll.shape(100 * 4 * size, 4, size)
    send, recv = Buffers(coll, shape, "float32", (False,), HOST).views(shape, rank, False)
    code = REDOPS["sum"] if coll.reduces else MOVE_ONLY
    fill_inputs(data, send, coll.inputs(rank, size, 0, shape), code)
    _host.collective_times(*native_call(_host, coll, None), send, recv, op=code, root=0, iters=1, comm=comm.py2f(),
                           chunk_bytes=8)
    expected = [seg for seg in coll.expected(rank, size, 0, shape) if seg.count]
    if expected:
        recv[expected[-1].offset] += 1
        if count_wrong(data, recv, expected, code, False) != 1:
            failures.append(f"{coll.name}: the checker missed a corrupted element")
all_failures = comm.gather(failures)
if rank == 0:
    for f in sum(all_failures, []):
        print("FAIL", f)
    print("CHECKED", checked)
world.close()
sys.exit(0)
