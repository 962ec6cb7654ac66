"""A wait for peers that runs past --timeout inside a call, as the GPU path's NCCL waits report it
(commbench._cuda.DeadlineExceeded, a TimeoutError): on this directory first in PYTHONPATH, the MPI
transport's timed calls on rank COMMBENCH_STUB_DEADLINE_RANK raise it from the
COMMBENCH_STUB_DEADLINE_CALL-th call on. The other ranks are left waiting in the collective, as
they are when a GPU stalls."""

import importlib.abc
import importlib.util
import os
import sys


def _patch(transport_type) -> None:
    real, calls = transport_type.times, [0]

    def times(self, world, *args, **kwargs):
        if world.rank == int(os.environ["COMMBENCH_STUB_DEADLINE_RANK"]):
            calls[0] += 1
            if calls[0] >= int(os.environ["COMMBENCH_STUB_DEADLINE_CALL"]):
                raise TimeoutError("ncclAllReduce did not finish within --timeout 30 s (rank 0, device 0): "
                                   "a peer rank is dead or stalled; NCCL communicator aborted")
        return real(self, world, *args, **kwargs)

    transport_type.times = times


class _PatchOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "commbench.transports.mpi":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _patch(type(module.MPI))

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _PatchOnImport())
