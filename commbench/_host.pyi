"""commbench._host (csrc/host/module.cpp): the host's timed loops over MPI. Checked against the built
module by `make check` (mypy's stubtest); the integers and flags after the buffers are keyword-only."""

from typing import ClassVar

from typing_extensions import Buffer

class _Enum:
    """A pybind11 enum's member: its number and its name."""
    def __init__(self, value: int) -> None: ...
    def __int__(self) -> int: ...
    def __index__(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def value(self) -> int: ...

class Collective(_Enum):
    __members__: ClassVar[dict[str, Collective]]
    allreduce: ClassVar[Collective]
    allgather: ClassVar[Collective]
    reducescatter: ClassVar[Collective]
    broadcast: ClassVar[Collective]
    reduce: ClassVar[Collective]
    alltoall: ClassVar[Collective]
    sendrecv: ClassVar[Collective]

class Algorithm(_Enum):
    __members__: ClassVar[dict[str, Algorithm]]
    library: ClassVar[Algorithm]
    ring: ClassVar[Algorithm]
    tree: ClassVar[Algorithm]
    chain: ClassVar[Algorithm]
    pairwise: ClassVar[Algorithm]

def collective_times(collective: Collective, algorithm: Algorithm, send: Buffer, recv: Buffer, *, op: int, root: int,
                     iters: int, comm: int, chunk_bytes: int, agg: int = 1, delay_s: float = 0.0,
                     loop: int = 1) -> list[float]: ...
def pingpong_times(send: Buffer, recv: Buffer, *, bytes: int, iters: int, comm: int, loop: int = 1, peer: int = -1,
                   first: bool = False) -> list[float]: ...
def bandwidth_times(send: Buffer, recv: Buffer, *, bytes: int, window: int, iters: int, comm: int, loop: int = 1,
                    peer: int = -1, first: bool = False) -> list[float]: ...
def fill_pattern(buffer: Buffer, op: int, rank: int, nranks: int, first: int = 0) -> None: ...
def count_wrong(buffer: Buffer, op: int, nranks: int, first: int = 0, source: int = -1) -> int: ...
def clock_floor() -> float: ...
def mpi_cuda_aware() -> bool: ...
def mpi_library_version() -> str: ...
