"""The collective sweep in this process, on a world of one rank over MPI_COMM_SELF (as mpi4py's own
tests run on COMM_SELF): every collective of the registry with every impl of the host path over MPI,
every dtype and reduction, each size filled, run and checked element by element, and a wrong element
counted. No launch, so `make check` runs them; the ranks' exchanges are the multi-rank tests'
(test_mpi_collectives, test_collectives_cli). Then overlap's loops: the library's non-blocking call
beside the computation, both checked (test_overlap runs them on two ranks)."""

import numpy as np
import pytest

from commbench import collectives
from commbench.collectives.dtypes import DTYPES, REDOPS
from commbench.launch.world import World
from commbench.run.collective import run_collective
from commbench.run.config import RunConfig
from commbench.run.overlap import Compute, run_overlap
from commbench.run.policy import Policy
from commbench.transports import impls_for
from commbench.transports.mpi import MPI as MPI_TRANSPORT

SIZES = (4, 1000, 65536)


@pytest.fixture(scope="module")
def world():
    from mpi4py import MPI
    return World(rank=0, size=1, hosts=["here"], launcher="local", comm=MPI.COMM_SELF)


def overlapping(coll) -> list:
    """The impls `overlap` measures by default on the host: library calls with a non-blocking form."""
    return [i for i in impls_for(coll, "cpu").values() if i.algorithm is None and i.transport.overlaps]


def _over_mpi(coll) -> list:
    return [impl for impl in impls_for(coll, "cpu").values() if impl.transport is MPI_TRANSPORT]


def _config(coll, impls, **kwargs) -> RunConfig:
    return RunConfig(op=coll.name, impls=tuple(i.name for i in impls), sizes=SIZES, device="cpu",
                     policy=Policy(warmup=1, iters=3), **kwargs)


@pytest.mark.parametrize("name", collectives.names())
def test_every_impl_over_mpi_is_exact_on_one_rank(name, world):
    coll = collectives.get(name)
    impls = _over_mpi(coll)
    assert impls, f"{name} has no impl over MPI on the host"
    cfg = _config(coll, impls, dtype=",".join(DTYPES), redop=",".join(REDOPS) if coll.reduces else "none")
    for impl in impls:
        impl.prepare(world, cfg)
    assert run_collective(world, cfg, coll, impls, None) == 0


class OneWrong:
    """An impl over MPI that delivers one element wrong: the check must count it."""

    def __init__(self, impl):
        self.impl = impl

    def __getattr__(self, name):  # the rest is the impl's own
        return getattr(self.impl, name)

    def rank_times(self, world, coll, send, recv, *args, **kwargs):
        times = self.impl.rank_times(world, coll, send, recv, *args, **kwargs)
        if recv.size:
            recv[0] = recv[0] + 1
        return times


@pytest.mark.parametrize("name", collectives.names())
def test_a_wrong_element_is_counted_on_one_rank(name, world):
    coll = collectives.get(name)
    impl = _over_mpi(coll)[0]
    cfg = _config(coll, [impl], dtype="int32")
    impl.prepare(world, cfg)
    # One wrong element per size that moves any (4 bytes in blocks of a whole alignment move none).
    moving = [size for size in SIZES if coll.shape(size, 4, 1).count]
    assert len(moving) >= 2 and run_collective(world, cfg, coll, [OneWrong(impl)], None) == len(moving)


# overlap (run/overlap.py): the library's non-blocking call beside the computation, on one rank.

def test_the_native_loops_time_both_sides_and_check_the_computation(world):
    from commbench import _host
    times, wrong = _host.compute_times(sweeps=200, iters=4)
    assert len(times) == 4 and min(times) > 0 and wrong == 0
    send, recv = np.arange(1024, dtype=np.float32), np.zeros(1024, dtype=np.float32)
    got = _host.overlap_times(_host.Collective.__members__["allreduce"], send, recv, op=0, root=0, iters=3,
                              comm=world.comm.py2f(), sweeps=200, probes=4)
    assert got.compute_wrong == 0 and np.array_equal(recv, send)  # one rank's sum is its own input
    assert all(len(x) == 3 for x in (got.total, got.compute, got.tests, got.done))
    assert all(0 < d <= t and c + s <= t for t, c, s, d in zip(got.total, got.compute, got.tests, got.done))
    assert min(got.tests) > 0  # four tests each
    alone = _host.overlap_times(_host.Collective.__members__["allreduce"], send, recv, op=0, root=0, iters=3,
                                comm=world.comm.py2f(), sweeps=0)
    assert max(alone.tests) == 0 and alone.done == alone.total
    with pytest.raises(ValueError, match="must not be negative"):
        _host.compute_times(sweeps=-1, iters=1)


@pytest.mark.parametrize("name", collectives.names())
def test_every_collective_is_exact_beside_the_computation_on_one_rank(name, world):
    coll = collectives.get(name)
    impls = overlapping(coll)
    assert impls, f"{name}: no library call with a non-blocking form on the host"
    cfg = _config(coll, impls, place="both" if coll.in_place else "out")
    for impl in impls:
        impl.prepare(world, cfg)
    assert run_overlap(world, cfg, coll, impls, Compute("loop"), 2, None) == 0


class OneWrongBeside:
    """The library's non-blocking call delivering one element wrong: the check must count it."""

    def __init__(self, transport):
        self.transport = transport

    def __getattr__(self, name):
        return getattr(self.transport, name)

    def overlap_times(self, world, coll, send, recv, *args):
        got = self.transport.overlap_times(world, coll, send, recv, *args)
        if recv.size:
            recv[0] = recv[0] + 1
        return got


def test_a_wrong_element_beside_the_computation_is_counted(world):
    coll = collectives.get("allreduce")
    [impl] = overlapping(coll)
    impl.transport = OneWrongBeside(impl.transport)
    assert run_overlap(world, _config(coll, [impl]), coll, [impl], Compute("loop", 10), 0, None) == 3  # once a size
