"""Native timed loops from commbench._host: MPI_Allreduce and our ring and tree over MPI. With
--device cuda only MPI_Allreduce runs, on GPU buffers, and only with a CUDA-aware MPI library."""

from __future__ import annotations

import numpy as np

from ..errors import CommbenchError


class NativeAllreduce:
    def __init__(self, name: str, description: str):
        self.name = name
        self.description = description

    def prepare(self, world, cfg) -> None:
        world.require_mpi(f"--impl {self.name}")
        if cfg.device == "cuda":
            from .. import _host
            if not _host.mpi_cuda_aware():
                raise CommbenchError(f"--impl mpi --device cuda: {_host.mpi_library_version().splitlines()[0][:60]} "
                                     f"is not CUDA-aware; use --impl nccl, or 'commbench copy' to see what staging "
                                     f"through host memory costs")
            world.device_comm(cfg.timeout_s)  # data on the rank's own GPU

    def times(self, world, send, recv, redop: int, iters: int, cfg) -> np.ndarray:
        from .. import _host
        if send.is_cuda:
            import torch
            torch.cuda.synchronize()
        return _host.allreduce_times(self.name, send, recv, redop, iters, world.comm.py2f(),
                                     cfg.chunk_bytes).numpy()
