"""The collective sweep in this process, on a world of one rank over MPI_COMM_SELF (as mpi4py's own
tests run on COMM_SELF): every collective of the registry with every impl of the host path over MPI,
every dtype and reduction, each size filled, run and checked element by element, and a wrong element
counted. No launch, so `make check` runs them; the ranks' exchanges are the multi-rank tests'
(test_mpi_collectives, test_collectives_cli)."""

import pytest

from commbench import collectives
from commbench.collectives.dtypes import DTYPES, REDOPS
from commbench.launch.world import World
from commbench.run.collective import run_collective
from commbench.run.config import RunConfig
from commbench.run.policy import Policy
from commbench.transports import impls_for
from commbench.transports.mpi import MPI as MPI_TRANSPORT

SIZES = (4, 1000, 65536)


@pytest.fixture(scope="module")
def world():
    from mpi4py import MPI
    return World(rank=0, size=1, hosts=["here"], launcher="local", comm=MPI.COMM_SELF)


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
