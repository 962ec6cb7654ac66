"""Native timed loops from commbench._host: MPI_Allreduce and our ring and tree over MPI."""

from __future__ import annotations

import numpy as np
import torch

from ..world import World


class NativeAllreduce:
    def __init__(self, name: str, description: str):
        self.name = name
        self.description = description

    def prepare(self, world: World) -> None:
        world.require_mpi(f"--impl {self.name}")

    def times(self, world: World, send: torch.Tensor, recv: torch.Tensor, redop: int, iters: int,
              chunk_bytes: int) -> np.ndarray:
        from .. import _host
        return _host.allreduce_times(self.name, send, recv, redop, iters, world.comm.py2f(),
                                     chunk_bytes).numpy()
